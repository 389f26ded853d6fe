# Behaviour 1.9 comm-status.sh: usage, invalid verb, needs-text and no-row texts with their exit codes.
$ alpha status
! usage: comm-status.sh <prompt|stop|interrupted|working|idle|blocked|done|waiting> ["text"]
[exit 2]

$ alpha status sleeping
! comm-status.sh: invalid verb 'sleeping' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)
[exit 2]

$ alpha status WORKING
! comm-status.sh: invalid verb 'WORKING' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)
[exit 2]

$ alpha status ''
! comm-status.sh: invalid verb '' (want prompt|stop|interrupted|working|idle|blocked|done|waiting)
[exit 2]

# No identity: events are silent, declarations say why they were discarded.
$ alpha status prompt

$ alpha status stop

$ alpha status interrupted

$ alpha status working 'on it'
! comm-status.sh: no registry row for '<no identity>' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha status idle
! comm-status.sh: no registry row for '<no identity>' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha status done
! comm-status.sh: no registry row for '<no identity>' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha status blocked 'a question'
! comm-status.sh: no registry row for '<no identity>' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha join --name alpha
Joined sot-comm as @alpha  (alpha on testhost).
  inbox: {HOME}/inbox/alpha.jsonl
Others registered: none

# blocked / waiting need text unless the fact already holds some; empty text is no text.
$ alpha status blocked
! comm-status.sh: blocked needs its text -- stamp discarded
[exit 2]

$ alpha status blocked ''
! comm-status.sh: blocked needs its text -- stamp discarded
[exit 2]

$ alpha status waiting
! comm-status.sh: waiting needs its text -- stamp discarded
[exit 2]

$ alpha status waiting ''
! comm-status.sh: waiting needs its text -- stamp discarded
[exit 2]

$ alpha status blocked 'which database?'

$ alpha status blocked

$ alpha status waiting 'CI on main'

$ alpha status waiting

$ alpha status done 'merged'

$ alpha status working

$ alpha status idle ''

$ alpha status prompt

$ alpha status stop

$ alpha status interrupted

# The row is gone but the self file still names alpha.
$ beta leave --name alpha
Removed @alpha from the registry (row only; comm-despawn.sh does full teardown).

$ alpha status working
! comm-status.sh: no registry row for 'alpha' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha status waiting 'x'
! comm-status.sh: no registry row for 'alpha' from cwd {ROOT:alpha} -- stamp discarded; run it from the session's project root
[exit 1]

$ alpha status stop

$ alpha status prompt
