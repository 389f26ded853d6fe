# Behaviour 1.2, 1.3, 1.5: two sessions join, send directed mail, poll it once.
$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ beta join --name beta
Joined sot-comm as @beta  (beta on testhost).
  inbox: {HOME}/inbox/beta.jsonl
Others registered: alpha

$ alpha send @beta hello there
  filed -> @beta

$ beta unread beta
1

$ beta poll
[{TS}] [alpha:alpha] hello there

$ beta unread beta
0

$ beta poll
No new messages.

# the message may itself start with @ once the target is named
$ beta send @alpha @alpha thanks
  filed -> @alpha

$ alpha poll
[{TS}] [beta:beta] @alpha thanks
