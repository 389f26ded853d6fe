# Behaviour 1.7 list and 1.8 leave.
$ alpha leave
Not joined — nothing to do.

$ alpha join --name alpha --expertise 'files, git'
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ beta join --name beta
Joined sot-comm as @beta  (beta on testhost).
  inbox: {HOME}/inbox/beta.jsonl
Others registered: alpha

$ alpha list
sot-comm agents  ({HOME}/registry.json):
  @alpha              testhost   alpha          live         [files/git]  <- me
      [idle]
  @beta               testhost   beta           live         []
      [idle]
<blank>
attached frontend boxes (this daemon):
  (none attached, or no daemon answered)

$ alpha leave --name gamma
@gamma not in registry — nothing to do.

$ alpha leave --name beta
Removed @beta from the registry (row only; comm-despawn.sh does full teardown).

$ alpha leave --name=
! --name= needs a handle
[exit 1]

$ alpha leave extra
! usage: comm-leave.sh [--name <handle>]
[exit 1]

# an unknown option: the same one line (behaviour 1.8), not the command table's two (issue 28 item 4)
$ alpha leave --bogus
! usage: comm-leave.sh [--name <handle>]
[exit 1]

$ alpha leave
Left sot-comm (@alpha removed).

$ alpha list
sot-comm agents  ({HOME}/registry.json):
  (none)
<blank>
attached frontend boxes (this daemon):
  (none attached, or no daemon answered)
