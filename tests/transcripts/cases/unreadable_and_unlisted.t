# Behaviour 1.3 (an identity whose row is gone), 1.7 and 1.8 (an unreadable registry lists and removes nothing).
$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ beta join --name beta
Joined sot-comm as @beta  (beta on testhost).
  inbox: {HOME}/inbox/beta.jsonl
Others registered: alpha

$ beta leave --name alpha
Removed @alpha from the registry (row only; comm-despawn.sh does full teardown).

# the self file still names alpha, but no row vouches for it
$ alpha send @beta hi
! FAILED -> @beta: your identity @alpha has no registry row; reclaim it with {BIN}/comm-join.sh --name alpha
[exit 1]

$ alpha send --broadcast hi
! FAILED -> --broadcast: your identity @alpha has no registry row; reclaim it with {BIN}/comm-join.sh --name alpha
[exit 1]

# reclaiming it as the text says
$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: beta

$ alpha send @beta back again
  filed -> @beta

% garbage-registry
$ alpha list
! FAILED: the registry could not be read; nothing was listed
! see why and what to do: sotd doctor
[exit 1]

$ alpha leave
! FAILED: the registry could not be read; nothing was removed
! see why and what to do: sotd doctor
[exit 1]

$ alpha leave --name beta
! FAILED: the registry could not be read; nothing was removed
! see why and what to do: sotd doctor
[exit 1]

$ beta poll
[{TS}] [alpha:alpha] back again

$ beta unread beta
0
