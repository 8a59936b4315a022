"""A client's personal address (Malamute mailboxes, Twino direct messages).

Delivered at once to a live, unpaused owner; otherwise kept in order, bounded by bytes,
and handed over when the owner (re)attaches or drains. Per-message expiry is enforced by
tick().

An address has one owner at a time, shared by every door (a Malamute address is a Twino
client id): a live owner keeps it against a client of another door, and once users are
configured against another user (claim). Within one door a new owner takes it over, as
Malamute's reconnecting clients need.

A mailbox with a journal (attach_journal, core.storage) is durable: every message sent to
it is put in the journal (its Entry kept beside it in `entries`, in step with `stored`)
and settled once handed to the owner ('acked', with the owner's door: mail has no
acknowledgement of its own, so the hand-over is the settlement), expired ('expired') or
given back by a door that could not send it (`restore`: it keeps its record).

Mail for an absent owner is kept however much comes (no size limit by default), so a
mailbox has a storage window as a queue has (core.window, set by bridge.spill when the
mailbox is made): past `windows`' bounds, stored mail is paged out and paged back in, in
order, as the owner takes it. The order rule is the queue's: while any mail is paged out,
new mail is paged out behind it, and `stored` is refilled before it runs dry (so every
check of `stored` for "holds mail" stays true). Expiry is checked for resident mail only;
paged-out mail is checked once it is paged back in.
"""
from collections import deque

from mqksbridge.core.message import Entry
from mqksbridge.core.permissions import CONSUME, MAILBOX, Taken, check
from mqksbridge.core.window import REGULAR

DELIVERED, STORED, DROPPED = "delivered", "stored", "dropped"


class Mailbox:
    priority = None             # one lane: a window (core.window) pages the regular one

    def __init__(self, name, limit_bytes=None):
        self.name = name
        self.limit_bytes = limit_bytes
        self.owner = None
        self.deliver = None         # deliver(mailbox, message) while attached
        self.deliver_run = None     # deliver_run(mailbox, messages), if the owner's door has it
        self.stored = deque()
        self.bytes = 0
        self.delivered = self.dropped = self.expired = 0
        self.journal = None         # core.storage: set once the mailbox is durable
        self.entries = deque()      # with a journal: the Entry of each stored message
        self._handing = None        # the Entry being handed over (restore keeps it)
        self.windows = None         # windows(mailbox) -> its window (module docstring)
        self.window = None

    def set_windows(self, windows):
        """Page stored mail past the window `windows(self)` makes (bridge.spill)."""
        self.windows = windows
        self.window = windows(self)
        self._trim()

    def __len__(self):
        """Stored mail, paged-out mail included."""
        window = self.window
        return len(self.stored) + (window.paged if window is not None else 0)

    def attach_journal(self, journal):
        """Make the mailbox durable: what it holds now and everything sent from here on
        goes to `journal` (module docstring)."""
        window = self.window
        if window is not None:      # its pages go to the journal: its pager changes
            while window.paged:
                self._page_in(window.messages)
            window.close()
        self.journal = journal
        self.entries = deque(Entry(message) for message in self.stored)
        for entry in self.entries:
            journal.put(entry)
        if window is not None:
            self.window = self.windows(self)
            self._trim()

    def recovered(self, entries):
        """Entries read back from the journal, in order (a broker starting up)."""
        for entry in entries:
            self.stored.append(entry.message)
            self.entries.append(entry)
            self.bytes += entry.message.size
        self._trim()

    def _trim(self):
        """Page out the stored mail past the window (recovered, or stored before it)."""
        window = self.window
        if window is None:
            return
        resident, kept = 0, 0
        for message in self.stored:
            if kept and (kept >= window.messages or resident + message.size > window.size):
                break
            resident += message.size
            kept += 1
        if kept == len(self.stored):
            return
        excess = [self.stored.pop() for _ in range(len(self.stored) - kept)]
        excess.reverse()
        if self.journal is not None:
            pages = [self.entries.pop() for _ in excess]
            pages.reverse()
        else:
            pages = list(map(Entry, excess))
        window.page_out(self, self.stored, pages)

    def _page_in(self, count):
        """Paged-out mail back at the end of `stored` (at least one, if any)."""
        entries = self.window.take(REGULAR, count)
        self.stored.extend(entry.message for entry in entries)
        if self.journal is not None:
            self.entries.extend(entries)

    def live_entries(self):
        """The entries the journal still holds for (compaction copies them forward)."""
        return iter(self.entries)

    def send(self, message, sender=None):
        """Deliver, store, or drop (over the byte limit); returns which happened. `sender`
        is the client that sent it, if a client did (a guarded mailbox checks it)."""
        journal = self.journal
        if self.owner is not None and not self.owner.paused and not self.stored:
            # (no mail is paged out: `stored` is refilled before it runs dry)
            self.delivered += 1
            if journal is None:
                self.deliver(self, message)
            else:
                entry = Entry(message)
                journal.put(entry)
                self._hand(message, entry)
            return DELIVERED
        if self.limit_bytes is not None and self.bytes + message.size > self.limit_bytes:
            self.dropped += 1
            return DROPPED
        self.bytes += message.size
        entry = None
        if journal is not None:
            entry = Entry(message)
            journal.put(entry)
        window = self.window
        if window is not None and not window.admits(self, self.stored, message):
            window.page_out(self, self.stored, (entry or Entry(message),))
        else:
            self.stored.append(message)
            if entry is not None:
                self.entries.append(entry)
        if self.owner is not None and not self.owner.paused:
            self.flush()
        return STORED

    def hand_run(self, messages):
        """send() for each of `messages` when all are delivered at once: to a live, unpaused
        owner with nothing stored, whose door takes runs (`deliver_run`, all or none).
        Returns how many (all), or 0 with nothing changed: then send them one by one.
        Never raises; a durable mailbox journals each, so it takes none."""
        owner, run = self.owner, self.deliver_run
        if (run is None or owner.paused or self.stored or self.journal is not None
                or not run(self, messages)):
            return 0
        self.delivered += len(messages)
        return len(messages)

    def _hand(self, message, entry):
        """Deliver a journaled message; it is settled unless the door gave it back."""
        owner = self.owner
        self._handing = entry
        try:
            self.deliver(self, message)
        finally:
            handed, self._handing = self._handing is entry, None
        if handed:
            self.journal.settle(entry, "acked", owner.door)

    def claim(self, owner, assigned=False):
        """Denied unless `owner` may consume this mailbox (or it was `assigned`: a name the
        broker made for this client, such as a Twino id it did not ask for); Taken while a
        live owner of another door (or, with users, of another user or anonymous) holds it."""
        if not assigned:
            check(owner, CONSUME, MAILBOX, self.name)
        current = self.owner
        if current is not None and current is not owner:
            if current.door != owner.door:
                raise Taken(self.name, current)
            principal = owner.principal
            if (principal is not None or current.principal is not None) and not (
                    principal is not None and principal.same_user(current.principal)):
                raise Taken(self.name, current)

    def attach(self, owner, deliver, assigned=False, deliver_run=None):
        """A client takes the address (taking over a previous owner of its door and user:
        claim) and gets its mail; `deliver_run` takes a run of it at once (hand_run)."""
        self.claim(owner, assigned)
        if self.owner is not None and self.owner is not owner:
            self.owner.mailbox = None
        self.owner = owner
        self.deliver = deliver
        self.deliver_run = deliver_run
        owner.mailbox = self
        self.flush()

    def detach(self, owner):
        if self.owner is owner:
            self.owner = None
            self.deliver = self.deliver_run = None
            owner.mailbox = None

    def flush(self):
        """Hand stored mail to the owner in order while it is able to take it."""
        owner = self.owner
        window = self.window
        while self.stored and owner is not None and not owner.paused and self.owner is owner:
            message = self.stored.popleft()
            self.bytes -= message.size
            self.delivered += 1
            if window is not None and window.paged and len(self.stored) < window.messages // 2:
                self._page_in(window.messages - len(self.stored))
            if self.journal is None:
                self.deliver(self, message)
            else:
                self._hand(message, self.entries.popleft())

    def restore(self, message):
        """A delivery the door could not hand over (owner vanished): first in line again
        (with its journal record, when it is the one being handed over)."""
        self.delivered -= 1
        self.stored.appendleft(message)
        self.bytes += message.size
        if self.journal is not None:
            entry = self._handing
            if entry is None or entry.message is not message:
                entry = Entry(message)
                self.journal.put(entry)
            self._handing = None
            self.entries.appendleft(entry)

    def tick(self, now):
        if not self.stored:
            return
        journal = self.journal
        kept = deque()
        kept_entries = deque()
        entries = iter(self.entries)
        for message in self.stored:
            entry = next(entries) if journal is not None else None
            if message.expires_at is not None and message.expires_at <= now:
                self.expired += 1
                self.bytes -= message.size
                if entry is not None:
                    journal.settle(entry, "expired")
            else:
                kept.append(message)
                if entry is not None:
                    kept_entries.append(entry)
        self.stored = kept
        if journal is not None:
            self.entries = kept_entries
        window = self.window
        if window is not None and window.paged and not kept:
            self._page_in(window.messages)
