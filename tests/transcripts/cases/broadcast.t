# Behaviour 1.3 broadcast, 1.5 poll shows broadcast copies, 1.6 unread never counts them.
$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ beta join --name beta
Joined sot-comm as @beta  (beta on testhost).
  inbox: {HOME}/inbox/beta.jsonl
Others registered: alpha

$ gamma join --name gamma
Joined sot-comm as @gamma  (gamma on testhost).
  inbox: {HOME}/inbox/gamma.jsonl
Others registered: alpha, beta

$ alpha send --broadcast stand-up in five
  filed -> @beta
  filed -> @gamma
Broadcast to 2 agent(s).

$ beta unread beta
0

$ beta poll
[{TS}] [alpha:alpha] stand-up in five

% stale gamma
$ alpha send --broadcast second
  filed -> @beta
Broadcast to 1 of 2 agent(s).
! FAILED -> @gamma: no live session holds @gamma
[exit 1]
