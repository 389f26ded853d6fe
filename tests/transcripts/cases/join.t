# Behaviour 1.2 and 6.8: options, derivation tiers, the slot guard.
$ alpha join --bogus
! comm-join.sh: unknown option '--bogus' (a handle can't start with '-'; see --help)
[exit 2]

$ alpha join
Joined sot-comm as @alpha-testhost  (alpha on testhost).
  inbox: {HOME}/inbox/alpha-testhost.jsonl
Others registered: none

# a second join from the same slot reclaims the same handle
$ alpha join
Joined sot-comm as @alpha-testhost  (alpha on testhost).
  inbox: {HOME}/inbox/alpha-testhost.jsonl
Others registered: none

$ alpha join --name 'bad/name'
! invalid handle 'bad/name': a handle is 1-64 bytes of A-Za-z0-9._-, with no '..' and no leading '-'
[exit 1]
