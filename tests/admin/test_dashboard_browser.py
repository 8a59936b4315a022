"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium): it loads from the admin endpoint, shows a queue a test client created, and its
depth follows messages published through another door. A screenshot is kept as a test
artifact (its path is printed; test-artifacts/ is git-ignored).

The broker runs in the test reactor; every browser call runs in a worker thread so the
reactor keeps serving the page's requests meanwhile.
"""
import os
import shutil

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1200")
ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "test-artifacts")

webdriver = pytest.importorskip("selenium.webdriver")
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip("Debian packages chromium and chromium-driver are not installed "
                "(make test installs them when run as root)", allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def start_browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def depth_shown(driver, queue):
    """The depth cell of `queue`'s row, or None while the row is not there (read in one
    script call: the page redraws its rows every second)."""
    return driver.execute_script(
        "const cell = document.querySelector(arguments[0]);"
        "return cell ? cell.textContent : null;",
        f'#queues tr[data-queue="{queue}"] td.depth')


def wait_for_depth(driver, queue, depth, timeout=20):
    WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: depth_shown(d, queue) == str(depth),
        f"the dashboard never showed {queue} at depth {depth}")


@pytest.fixture
def browser(tmp_path):
    driver = start_browser(tmp_path / "profile")
    yield driver
    driver.quit()


@pytest_twisted.ensureDeferred
async def test_dashboard_shows_a_queue_and_its_depth_live(server, browser, tmp_path):
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm dashboard-jobs ev") == "c1 ok "
    assert await mqks.request("d1 delete_consumer --confirm c1") == "d1 ok "
    url = f"http://127.0.0.1:{server.port('admin')}/"

    await deferToThread(browser.get, url)
    await deferToThread(wait_for_depth, browser, "dashboard-jobs", 0)

    twino = await server.twino(name="dashboard-producer")
    for i in range(5):
        await twino.push("dashboard-jobs", 0, f"job {i}")
    await twino.ping()                    # answered after the pushes: they are queued
    await deferToThread(wait_for_depth, browser, "dashboard-jobs", 5)

    consumer = await server.mqks()
    assert await consumer.request("c2 consume --confirm dashboard-jobs") == "c2 ok "
    await consumer.lines_n(5)
    await deferToThread(wait_for_depth, browser, "dashboard-jobs", 0)

    def page_state(driver):
        """What the page shows, read in one script call (rows are redrawn every second)."""
        state = driver.execute_script("""
            const all = s => Array.from(document.querySelectorAll(s));
            return {
              title: document.title,
              doors: all(".card").map(e => e.dataset.door).sort(),
              flows: all("#flows path").map(e => [e.dataset.from, e.dataset.to]),
              connections: all("#connections tr[data-connection]").length,
              status: document.getElementById("status").className,
            };""")
        state["flows"] = [tuple(f) for f in state["flows"]]
        return state
    WebDriverWait(browser, 20, 0.1).until(
        lambda d: ("twino", "mqks") in page_state(d)["flows"], "no twino -> mqks flow drawn")
    state = await deferToThread(page_state, browser)
    assert state["title"] == "mqksbridge"
    assert state["doors"] == ["malamute", "mqks", "textqueue", "twino"]
    assert state["connections"] == 3 and "live" in state["status"]

    shot = tmp_path / "dashboard.png"
    assert await deferToThread(browser.save_screenshot, str(shot))
    os.makedirs(ARTIFACTS, exist_ok=True)
    kept = os.path.join(ARTIFACTS, "dashboard.png")
    shutil.copyfile(shot, kept)
    print(f"dashboard screenshot: {shot} (also {kept})")
    assert shot.stat().st_size > 10_000
