"""``sotd web`` (issue 30): a local page of this box's fleet, live, beside the daemon.

A process of its own (``sotd web``), never part of the daemon: it reads what the CLI reads (the registry,
the cursors and inboxes, ``version.query`` and ``workspace.list`` of this box's daemon, the rows' tmux
screens) only while a page is open, and it writes only through the CLI's own verbs (``send``, ``spawn``,
``despawn``), run as subprocesses. Modules: ``guard`` (who may ask what: pure), ``snapshot`` (the fleet as
one JSON object, every string inert), ``actions`` (the three verbs a page may run), ``server`` (the HTTP
server and its server-sent events), and the page itself (``page.html``, ``page.js``, ``page.css``: no build
step). docs/web.md says how to reach it and what guards it.
"""
