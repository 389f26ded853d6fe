# Behaviour 1.5: poll before joining, with no inbox, torn tails, foreign lines; D14 shows every line.
$ alpha poll
! Not joined — run comm-join.sh first.
[exit 1]

$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

$ alpha poll
No new messages.

# lines for another handle, self-sent lines and garbage: shown (or skipped) but never counted as unread
% raw alpha {"from":"x","to":"other","repo":"r","msg":"not for you","ts":"2026-01-01T00:00:00Z"}\n
% raw alpha {"from":"alpha","to":"alpha","repo":"r","msg":"self echo","ts":"2026-01-01T00:00:01Z"}\n
% raw alpha not json at all\n
% raw alpha {"from":"x","to":"alpha","repo":"r","text":"old field name","ts":"2026-01-01T00:00:02Z"}\n
% raw alpha {"from":"x","to":"alpha","repo":"r","msg":"torn, never shown
$ alpha unread alpha
1

$ alpha poll
[2026-01-01T00:00:00Z] [x:r] not for you
[2026-01-01T00:00:01Z] [alpha:r] self echo
[2026-01-01T00:00:02Z] [x:r] old field name

$ alpha poll
No new messages.
