"""A client's input as a door hands it to the core (core.flow): records pause/resume."""


class Input:
    """What a door hands the core as a client's input: records pause/resume."""

    def __init__(self):
        self.calls = []

    def pauseProducing(self):
        self.calls.append("pause")

    def resumeProducing(self):
        self.calls.append("resume")
