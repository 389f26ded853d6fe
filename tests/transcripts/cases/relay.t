# Behaviour 1.4: comm-relay.sh send. Usage texts first (exit 1, before anything else), then the send path.
$ alpha relay send hello
! usage: comm-relay.sh send @to "msg" | --all "msg"  (no recipient)
[exit 1]

$ alpha relay send
! usage: comm-relay.sh send @to "msg" | --all "msg"  (no recipient)
[exit 1]

# a bare "@" names nobody
$ alpha relay send @ hello
! usage: comm-relay.sh send @to "msg" | --all "msg"  (no recipient)
[exit 1]

$ alpha relay send @beta
! usage: comm-relay.sh send @to "msg" | --all "msg"  (empty message)
[exit 1]

$ alpha relay send @beta ""
! usage: comm-relay.sh send @to "msg" | --all "msg"  (empty message)
[exit 1]

$ alpha relay send --all
! usage: comm-relay.sh send @to "msg" | --all "msg"  (empty message)
[exit 1]

$ alpha relay
! usage: comm-relay.sh send @to "msg" | --all "msg" | bridge
[exit 1]

# the routable identity comes before any routing
$ alpha relay send @beta hi
! FAILED -> @beta: your sot-comm identity did not resolve — refusing to send with no verifiable from-handle (a reply would silently misroute). Join first: comm-join.sh --name <canonical-handle> (never a bare comm-join.sh if you previously held one — see the sot-session-start skill's recovery recipe).
[exit 1]

$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ beta join --name beta
Joined sot-comm as @beta  (beta on testhost).
  inbox: {HOME}/inbox/beta.jsonl
Others registered: alpha

# a listed handle is filed through this box's folder; later @words are message text
$ alpha relay send @beta hi @gamma, see this
  filed -> @beta

# --all is a broadcast, and every @word in it is text
$ alpha relay send --all @beta ping
  filed -> @beta
Broadcast to 1 agent(s).

$ beta poll
[{TS}] [alpha:alpha] hi @gamma, see this
[{TS}] [alpha:alpha] @beta ping

# a handle this folder does not list goes to the relay endpoint, and there is none
$ alpha relay send @gamma hi
! FAILED -> @gamma: no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or (Windows) pipe:name
! @gamma is not registered here ({HOME}/registry.json) and no hub is configured; see who is: sotd comm list
[exit 1]

% garbage-registry
$ alpha relay send @beta hi
! FAILED -> @beta: the registry could not be read, so identity @alpha is unverified; nothing was sent
! see why and what to do: sotd doctor
[exit 1]
