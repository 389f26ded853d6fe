"""``sotd doctor``: what is wrong on this box, why it matters, and the command that fixes it.

Spec: issue 13 part 4 (the checks, ``--json``, exit 0 healthy / 1 a problem, read-only unless ``--fix``);
every rule it applies is the rule's own function (``layout.is_open`` and ``tighten``, ``registry.read``,
``reglock.read_fresh`` and ``holder.judge``, ``inbox.torn_tail``/``cut_torn_tail``, ``cursor.offset``,
``lockmanager.decide``, ``install.settings.merge_claude_settings``, ``ancestry.check``), never a second copy.
Guarantee: without ``--fix`` nothing under the comm folder or anywhere else is written; ``--fix`` applies
only fixes that are safe by the contract (tightening modes as every command does; the registry lock's own
reclaim, which removes a lock only when its holder is proven dead; removing reclaim markers whose holder
and reclaimer are both proven dead, while holding the registry lock; cutting a torn inbox tail under the
inbox lock, as the next appender would) and prints each. Each finding names a command the user can type.
What would break it: a check that writes, or a fix that removes a lock on anything but proof of death.

The package, one module a concern: ``report`` (the findings are values: ``Finding``, ``Report``),
``folder_checks`` (the comm folder: modes, registry, its lock and markers, inboxes, the lock record),
``daemon_checks`` (this box's daemon, the topology and the linked boxes, the rows), ``agent_checks`` (the
wrappers and hooks, this process's identity), and ``command`` (``examine`` runs the checks in order,
``run`` applies ``--fix`` and prints). The checks gather facts and make findings; only ``run`` prints.
"""
