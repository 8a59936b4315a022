"""The parts of a queue (core.queue), one module each.

A queue's delivery mode is one object of a mode family, swapped when the mode changes:

base         the modes and what they share: a put is stored, a hand-back goes to the
             back, nothing is pushed (paused); the storing modes' differences (pull,
             cache, stopped) are a line or two each and live there too
round_robin  one ready consumer per message, strictly rotating, or the first whose
             filter matches, with its shortcuts (direct hand-over, first match, drains)
push         push-all, only-first and broadcast: every consumer present at once, with
             the fan-out shortcut

and what every mode uses, as collaborators the queue holds:

backlog      the stored entries: two lanes, their bytes and the storage window
capacity     the queue's limits and what a full queue does (its overflow policy)
timers       ack deadlines and the when-unused timer
pull         taking stored entries for a requester (Twino Pull)
"""
