"""The API key and the Hugging Face token in a real Secret Service: GNOME Keyring on a D-Bus
session bus of the test's own, reached by kvpilot through the ``keyring`` package exactly as on a
Linux desktop (no backend is installed by hand; keyring finds Secret Service itself).

Each step runs kvpilot in a fresh Python process (keyring picks its backend once per process) and
checks the result from outside kvpilot: the settings file, the keyring's items read with
``secretstorage``, GNOME Keyring's file on disk and kvpilot's log.

``tests/run`` installs ``gnome-keyring`` and ``dbus-daemon`` where it may; without them these
tests skip and say why, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

TOKEN = "hf_PLANTEDsecretservice0123456789"
KEY = "sk-planted-secret-service-key-7"
KEYRING_PASSWORD = "kvpilot-test-login"
START_TIMEOUT_S = 20.0

pytestmark = pytest.mark.system


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the Secret Service tests need GNOME Keyring under CI: {reason}",
                    pytrace=False)
    pytest.skip(f"no Secret Service to test against ({reason}); tests/run installs "
                "gnome-keyring and dbus-daemon where it may (apt-get)")


@dataclass(frozen=True)
class SecretService:
    """A running GNOME Keyring; ``env`` reaches it (its bus, its data and runtime folders)."""

    env: dict[str, str]
    keyring_dir: Path


def _wait_for_name(env: dict[str, str], name: str) -> None:
    """Wait until ``name`` is owned on the bus in ``env`` (the daemon answers)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        probe = subprocess.run(
            ["dbus-send", "--session", "--print-reply", "--dest=org.freedesktop.DBus",
             "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", f"string:{name}"],
            env=env, capture_output=True, text=True, timeout=5, check=False,
        )
        if "boolean true" in probe.stdout:
            return
        time.sleep(0.1)
    pytest.fail(f"{name} did not appear on the test's session bus in {START_TIMEOUT_S:.0f} s")


@pytest.fixture
def secret_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecretService]:
    """A D-Bus session bus and an unlocked GNOME Keyring on it, both of this test's own."""
    for program in ("dbus-daemon", "dbus-send", "gnome-keyring-daemon"):
        if shutil.which(program) is None:
            _missing(f"{program} is not on PATH")
    root = tmp_path_factory.mktemp("secret-service")
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {
        key: value for key, value in os.environ.items()
        # no display: a locked keyring must fail at once instead of opening a prompt window
        if key not in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS",
                       "PYTHON_KEYRING_BACKEND", "KVPILOT_SECRETS")
    }
    env.update(HOME=str(root / "home"), XDG_DATA_HOME=str(root / "data"),
               XDG_CONFIG_HOME=str(root / "config-home"), XDG_RUNTIME_DIR=str(runtime))
    for folder in ("home", "data", "config-home"):
        (root / folder).mkdir()
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1",
         f"--address=unix:path={runtime / 'bus'}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    keyring_daemon: subprocess.Popen[str] | None = None
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        if not address:
            _missing(f"dbus-daemon exited with {bus.wait(timeout=5)} before printing its address")
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        keyring_daemon = subprocess.Popen(
            ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True,
        )
        assert keyring_daemon.stdin is not None
        keyring_daemon.stdin.write(KEYRING_PASSWORD)  # creates and unlocks the login keyring
        keyring_daemon.stdin.close()
        _wait_for_name(env, "org.freedesktop.secrets")
        yield SecretService(env, root / "data" / "keyrings")
    finally:
        for process in (keyring_daemon, bus):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        if bus.stdout is not None:
            bus.stdout.close()


def _kvpilot(
    service: SecretService, config_dir: Path, body: str
) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh Python with kvpilot's settings store for ``config_dir`` as
    ``store``, kvpilot's log at DEBUG on stderr; fails the test when it fails."""
    script = textwrap.dedent(
        """
        import json, logging, sys
        from pathlib import Path
        from dataclasses import replace
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        from kvpilot.core.app import settings as st
        store = st.SettingsStore(Path(sys.argv[1]))
        """
    ) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script, str(config_dir)], env=service.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def _items(service: SecretService) -> dict[str, str]:
    """kvpilot's items in the Secret Service, read with ``secretstorage`` (not kvpilot):
    user name -> secret."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import json, secretstorage
            connection = secretstorage.dbus_init()
            found = {}
            for item in secretstorage.search_items(connection, {"service": "kvpilot"}):
                found[item.get_attributes()["username"]] = item.get_secret().decode()
            print(json.dumps(found))
            """
        )],
        env=service.env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, str] = json.loads(done.stdout)
    return found


def _lock(service: SecretService) -> None:
    """Lock the default collection, as the desktop does on screen lock or after a timeout."""
    done = subprocess.run(
        [sys.executable, "-c", "import secretstorage\n"
         "secretstorage.get_default_collection(secretstorage.dbus_init()).lock()"],
        env=service.env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr


def _old_settings_file(config_dir: Path) -> Path:
    """A settings file as an earlier kvpilot wrote it: both secrets in the file (0600)."""
    from kvpilot.core.app import secrets as sec
    from kvpilot.core.app import settings as st

    old = st.SettingsStore(config_dir, secrets=sec.SecretStore(sec.KIND_SETTINGS_FILE))
    settings = st.Settings()
    old.save(st.update_profile(
        settings, replace(settings.profile("Default"), api_key=KEY, hf_token=TOKEN)
    ))
    assert TOKEN in old.path.read_text()
    return old.path


def test_secrets_in_an_old_file_move_into_gnome_keyring_and_come_back(
    secret_service: SecretService, tmp_path: Path
) -> None:
    path = _old_settings_file(tmp_path)
    first = _kvpilot(secret_service, tmp_path, """
        result = store.load()
        active = result.settings.active
        print(json.dumps({"kind": store.secrets.kind, "describe": store.secrets.describe(),
                          "lengths": [len(active.hf_token), len(active.api_key)]}))
    """)
    seen = json.loads(first.stdout)
    assert seen["kind"] == "keyring"
    assert "system keyring (SecretService Keyring), not in the settings file" in seen["describe"]
    assert seen["lengths"] == [len(TOKEN), len(KEY)]  # the profile still has them, in memory
    # the file no longer holds them; GNOME Keyring does, under kvpilot's names
    raw = json.loads(path.read_text())
    assert (raw["profiles"][0]["hf_token"], raw["profiles"][0]["api_key"]) == ("", "")
    assert TOKEN not in path.read_text() and KEY not in path.read_text()
    assert _items(secret_service) == {"Default/hf_token": TOKEN, "Default/api_key": KEY}
    # GNOME Keyring keeps them encrypted on disk; kvpilot's log names the move, not the values
    on_disk = b"".join(p.read_bytes() for p in secret_service.keyring_dir.glob("*.keyring"))
    assert on_disk and TOKEN.encode() not in on_disk and KEY.encode() not in on_disk
    assert "moved the secrets of 1 profile(s) to the keyring" in first.stderr
    # keyring chains Secret Service with keyrings.alt's plain-text file here; kvpilot used
    # Secret Service alone and wrote no file the user did not accept
    assert not (Path(secret_service.env["XDG_DATA_HOME"]) / "python_keyring").exists()
    assert TOKEN not in first.stderr + first.stdout and KEY not in first.stderr + first.stdout

    # a later start reads them back from the keyring alone
    again = _kvpilot(secret_service, tmp_path, """
        active = store.load().settings.active
        print(json.dumps([active.hf_token, active.api_key]))
    """)
    assert json.loads(again.stdout) == [TOKEN, KEY]
    assert "moved the secrets" not in again.stderr


def test_a_deleted_profile_takes_its_items_out_of_the_keyring(
    secret_service: SecretService, tmp_path: Path
) -> None:
    _kvpilot(secret_service, tmp_path, """
        settings = st.create_profile(st.Settings(), "gated")
        settings = st.update_profile(
            settings, replace(settings.profile("gated"), hf_token="hf_gated_only_token_1"))
        store.save(settings)
    """)
    assert _items(secret_service).get("gated/hf_token") == "hf_gated_only_token_1"
    _kvpilot(secret_service, tmp_path, """
        settings = store.load().settings
        store.save(st.delete_profile(settings, "gated"))
    """)
    assert not any(user.startswith("gated/") for user in _items(secret_service))


def test_a_locked_keyring_keeps_the_secret_in_the_0600_file(
    secret_service: SecretService, tmp_path: Path
) -> None:
    path = _old_settings_file(tmp_path)
    _lock(secret_service)
    done = _kvpilot(secret_service, tmp_path, """
        active = store.load().settings.active
        print(json.dumps({"kind": store.secrets.kind,
                          "kept": [len(active.hf_token), len(active.api_key)]}))
    """)
    seen = json.loads(done.stdout)
    # Secret Service is there, so kvpilot uses it; it refuses while locked (there is no
    # prompt to unlock it here), so the secrets stay where they were instead of being lost
    assert seen == {"kind": "keyring", "kept": [len(TOKEN), len(KEY)]}
    assert TOKEN in path.read_text() and KEY in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    assert "cannot store hf_token of profile 'Default': KeyringLocked" in done.stderr
    assert TOKEN not in done.stderr and KEY not in done.stderr
