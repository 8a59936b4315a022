"""A broker journal with dead letters, written by a real `twistd -n mqksbridge`: queue
`jobs` (durable, max_deliveries 2) gets three messages over MQKS; an MQKS consumer acks
the first, rejects the second twice (it is dead-lettered to jobs.dlq, where it waits)
and the third once, then leaves holding it (the second hand-back: dead-lettered too).
Shared by the local and the cluster tests, which read it through the pipeline."""
import os

from mqksbridge.bridge.clients.mqks import MqksClient
from tests.support.process import BrokerProcess

MAX_DELIVERIES = 2
WAIT = 30
SETTINGS = ('[durability]\nqueues = ["jobs", "jobs.dlq"]\nfsync = "always"\n'
            f"max_deliveries = {MAX_DELIVERIES}\n")


def broker(workdir):
    """A started broker with the MQKS door and the settings above."""
    settings = os.path.join(str(workdir), "mqksbridge.toml")
    with open(settings, "w") as f:
        f.write(SETTINGS)
    return BrokerProcess(workdir, doors=("mqks",), args=["--config", settings]).start()


def stop(running):
    """SIGTERM: the broker writes its pending journal edits (retry counts, settles) before
    it exits; SIGKILL only if it does not."""
    if running.process.poll() is None:
        running.process.terminate()
        running.process.wait(WAIT)
    running.stop()


def next_of(client, consumer):
    while True:
        delivery = client.recv(WAIT)
        if delivery.consumer == consumer:
            return delivery


def write(workdir):
    """Run the traffic; returns ({'acked', 'dead', 'back'}: message id), the journal
    directory. The dead letter's copy waits in jobs.dlq (no consumer takes it: one that
    left would hand it back, a retry)."""
    running = broker(workdir)
    client = MqksClient(port=running.ports["mqks"], timeout=WAIT)
    try:
        jobs = client.consume("jobs", ["job.run"], manual_ack=True)
        ids = {name: client.publish("job.run", name) for name in ("acked", "dead", "back")}
        seen = {}
        while seen.get(ids["dead"]) != MAX_DELIVERIES or seen.get(ids["back"]) != 2:
            delivery = next_of(client, jobs)
            seen[delivery.id] = seen.get(delivery.id, 0) + 1
            if delivery.id == ids["acked"]:
                client.ack(jobs, delivery.id)
            elif delivery.id == ids["dead"] or seen[delivery.id] == 1:
                client.reject(jobs, delivery.id)
        client.delete_consumer(jobs)        # it leaves holding "back": a hand-back
        assert client.ping() == "mqks.client"
    finally:
        client.close()
        stop(running)
    return ids, os.path.join(str(workdir), "var", "journal")
