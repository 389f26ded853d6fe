# Behaviour 1.3: usage, routable identity, and per-target failures; FAILED is exit 1.
$ alpha send @beta
! usage: comm-send.sh @name "msg" | --broadcast "msg"
[exit 1]

$ alpha send just words
! no target; use @name or --broadcast
[exit 1]

$ alpha send @beta hi
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

# a handle this folder does not list goes to the relay, and there is none; the second line is the hint
# (issue 13: before, the protocol line stood alone)
$ alpha send @gamma hi
! FAILED -> @gamma: no sotd daemon found; set SOT_RELAY_ENDPOINT=unix:/path, ssh:target[/host], or (Windows) pipe:name
! @gamma is not registered here ({HOME}/registry.json) and no hub is configured; see who is: sotd comm list
[exit 1]

% stale beta
$ alpha send @beta hi
! FAILED -> @beta: no live session holds @beta
[exit 1]

$ alpha send @../x hi
! FAILED -> @../x: not a handle: "../x"
[exit 1]

% foreign-row alpha /somewhere/else
$ alpha send @beta hi
! FAILED -> @beta: your sot-comm identity '@alpha' is registered to a DIFFERENT project's root ('/somewhere/else') — refusing to send with a misrouting from-handle. Reclaim it: {BIN}/comm-join.sh --name alpha
[exit 1]

% garbage-registry
$ alpha send @beta hi
! FAILED -> @beta: the registry could not be read, so identity @alpha is unverified; nothing was sent
! see why and what to do: sotd doctor
[exit 1]

$ alpha send --broadcast hi
! FAILED -> --broadcast: the registry could not be read; nothing was sent
! see why and what to do: sotd doctor
[exit 1]
