"""The dashboard's cluster panel in headless Chromium, on a gateway over the session's
3-node RabbitMQ cluster: its nodes, itself among the gateways, a queue with its replicas."""
import pytest_twisted
from twisted.internet.threads import deferToThread

from tests.admin.test_dashboard_browser import WebDriverWait, browser  # noqa: F401
from tests.cluster.test_cluster_status import gateway_overrides


def panel(driver):
    """What the cluster panel shows, read in one script call (it is redrawn every second)."""
    return driver.execute_script("""
        const rows = id => [...document.querySelectorAll(`#${id} tbody tr`)].map(
            tr => [...tr.children].map(td => td.textContent));
        return {hidden: document.getElementById("cluster-section").hidden,
                meta: document.getElementById("cluster-meta").textContent,
                nodes: rows("cluster-nodes"), gateways: rows("cluster-gateways"),
                queues: rows("cluster-queues")};""")


def wait_for(driver, condition, message, timeout=30):
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: condition(panel(d)) and panel(d), message)


@pytest_twisted.ensureDeferred
async def test_the_cluster_panel_shows_nodes_and_replicas(  # noqa: F811 (browser)
        rabbitmq_cluster, running, browser):
    server = await running(gateway_overrides(rabbitmq_cluster, "gw-dash"))
    server.broker.queue("dash-jobs")
    await deferToThread(browser.get, f"http://127.0.0.1:{server.port('admin')}/")
    shown = await deferToThread(
        wait_for, browser, lambda p: not p["hidden"] and any(
            row[0] == "dash-jobs" for row in p["queues"]), "no cluster panel with dash-jobs")
    assert [(row[0], row[1]) for row in shown["nodes"]] == [
        (f"rabbit-{i}@localhost", "running") for i in (1, 2, 3)]
    jobs = next(row for row in shown["queues"] if row[0] == "dash-jobs")
    assert jobs[1] == "quorum" and jobs[3] == "3/3"
    assert shown["meta"].startswith("gateway gw-dash · connected to amqp://mqksbridge:***@")


@pytest_twisted.ensureDeferred
async def test_the_panel_stays_hidden_on_the_embedded_engine(server, browser):  # noqa: F811
    await deferToThread(browser.get, f"http://127.0.0.1:{server.port('admin')}/")
    await deferToThread(WebDriverWait(browser, 30, poll_frequency=0.1).until,
                        lambda d: d.execute_script("return document.body.dataset.updates"),
                        "the dashboard never refreshed")
    assert (await deferToThread(panel, browser))["hidden"]
