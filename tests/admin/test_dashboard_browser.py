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
from twisted.internet import defer
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
              charts: all(".card canvas").length,
              flows: all("#flows path").map(e => [e.dataset.from, e.dataset.to]),
              connections: all("#connections tr[data-connection]").length,
              status: document.getElementById("status").className,
            };""")
        state["flows"] = [tuple(f) for f in state["flows"]]
        return state
    server.advance(1.0)                   # the sampler's next pass: the flows it shows
    await deferToThread(               # in a thread: the page's requests need the reactor
        WebDriverWait(browser, 20, 0.1).until,
        lambda d: ("twino", "mqks") in page_state(d)["flows"], "no twino -> mqks flow drawn")
    state = await deferToThread(page_state, browser)
    assert state["title"] == "mqksbridge"
    assert state["doors"] == ["malamute", "mqks", "textqueue", "twino"]
    assert state["charts"] == 4                   # a rate chart per door
    assert state["connections"] == 3 and "live" in state["status"]

    shot = tmp_path / "dashboard.png"
    assert await deferToThread(browser.save_screenshot, str(shot))
    os.makedirs(ARTIFACTS, exist_ok=True)
    kept = os.path.join(ARTIFACTS, "dashboard.png")
    shutil.copyfile(shot, kept)
    print(f"dashboard screenshot: {shot} (also {kept})")
    assert shot.stat().st_size > 10_000


# -- logging in ---------------------------------------------------------------------------------
def shown(driver, element_id):
    """Whether the element is on the page and not hidden."""
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]); return !!e && !e.hidden;", element_id)


def text_of(driver, selector):
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector)


def wait(driver, condition, message, timeout=20):
    WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition, message)


def log_in_through_the_form(driver, user, password):
    from selenium.webdriver.common.by import By
    wait(driver, lambda d: shown(d, "login"), "no login form")
    for element_id, value in (("login-user", user), ("login-password", password)):
        field = driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(value)
    driver.find_element(By.ID, "login-submit").click()


def click_queue_action(driver, queue, action):
    """Click the row's button in one script call (the rows are redrawn every second)."""
    assert driver.execute_script(
        "const b = document.querySelector(arguments[0]); if (b) b.click(); return !!b;",
        f'#queues tr[data-queue="{queue}"] button[data-action="{action}"]')


def page_status(driver):
    """What a page fetch of /api/overview answers now (with the browser's cookies)."""
    return driver.execute_async_script(
        "const done = arguments[0];"
        "fetch('/api/overview', {cache: 'no-store'}).then(r => done(r.status));")


@pytest.fixture
def users_broker(tmp_path):
    """A broker with a users file: `ops` manages everything, `jobs` only queue dash-jobs."""
    from mqksbridge.bridge.security.users import hash_password
    from tests.conftest import RunningBroker
    fast = {"n": 1 << 10}
    users = tmp_path / "users.toml"
    users.write_text(f'''
[users.ops]
password = "{hash_password("ops-secret", **fast)}"
publish = ["*"]
consume = ["*"]
manage = ["*"]

[users.jobs]
password = "{hash_password("jobs-secret", **fast)}"
manage = ["queue:dash-jobs"]
''')
    broker = RunningBroker({"security": {"users": str(users)},
                            "mqks": {"listen_users": {RunningBroker.LOOPBACK["mqks"]: "ops"}},
                            "admin": {"session_lifetime": 900.0}})
    yield broker
    pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


@pytest_twisted.ensureDeferred
async def test_dashboard_login_action_expiry_and_logout(users_broker, browser):
    broker = await users_broker.start()
    mqks = await broker.mqks()
    for i, queue in enumerate(("dash-jobs", "dash-other")):
        assert await mqks.request(f"c{i} consume --confirm {queue} ev") == f"c{i} ok "
        assert await mqks.request(f"d{i} delete_consumer --confirm c{i}") == f"d{i} ok "
    url = f"http://127.0.0.1:{broker.port('admin')}/"
    await deferToThread(browser.get, url)

    await deferToThread(log_in_through_the_form, browser, "jobs", "wrong")
    await deferToThread(wait, browser, lambda d: text_of(d, "#login-error") ==
                        "wrong user or password", "no refusal shown for a wrong password")
    assert not await deferToThread(shown, browser, "dashboard")

    await deferToThread(log_in_through_the_form, browser, "jobs", "jobs-secret")
    await deferToThread(wait_for_depth, browser, "dash-jobs", 0)
    assert await deferToThread(shown, browser, "dashboard")
    assert await deferToThread(text_of, browser, "#who") == "jobs"
    cookies = {c["name"]: c for c in await deferToThread(browser.get_cookies)}
    session = cookies["mqksbridge_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and not session["secure"]
    assert await deferToThread(browser.execute_script, "return document.cookie") == ""

    await deferToThread(click_queue_action, browser, "dash-jobs", "pause")
    await deferToThread(wait, browser, lambda d: text_of(
        d, '#queues tr[data-queue="dash-jobs"] td:nth-child(2)') == "paused",
        "the dashboard never showed dash-jobs paused")
    assert broker.broker.queues["dash-jobs"].mode == "paused"
    await deferToThread(click_queue_action, browser, "dash-other", "pause")
    await deferToThread(wait, browser, lambda d: "may not manage queue 'dash-other'" in (
        text_of(d, "#action-status") or ""), "no refusal shown for dash-other")
    assert broker.broker.queues["dash-other"].mode != "paused"

    broker.clock.advance(900)                 # the session's lifetime on the broker's clock
    await deferToThread(wait, browser, lambda d: shown(d, "login") and text_of(
        d, "#login-error") == "the session expired (log in again)", "the expiry not shown")

    await deferToThread(log_in_through_the_form, browser, "jobs", "jobs-secret")
    await deferToThread(wait, browser, lambda d: shown(d, "logout"), "no logout button")
    assert await deferToThread(page_status, browser) == 200
    await deferToThread(browser.execute_script, "document.getElementById('logout').click()")
    await deferToThread(wait, browser, lambda d: shown(d, "login") and text_of(
        d, "#login-error") == "logged out", "not logged out")
    assert await deferToThread(page_status, browser) == 401
    assert not broker.top.admin.factory.resource.auth.sessions
