"""The sealing key file of the embedded default: ``<LAKE_HOME>/flight-keys``.

Without ``LAKE_FLIGHT_KEYS`` / ``LAKE_FLIGHT_SECRET_KEY`` every endpoint on one home reads its
keys from this file, so a restarted endpoint and a second endpoint on the same home open each
other's bearer tokens, tickets and prepared handles. One ``kid:hex`` line per key, oldest
first: the last line seals, every line opens (the ring of ``LAKE_FLIGHT_KEYS``).

The file is created once, mode 0600, atomically: the key is written to a private temporary
file and hard-linked into place, and ``link`` fails if the name exists, so two endpoints
starting at once end up reading the same single key (the loser discards its own). Rotation
rewrites the file through a temporary file and ``rename`` (readers see the old or the new
ring, never half of one). A file other users can read or write, or one that does not parse,
is refused with a :class:`SettingsError` naming it: a key anyone can read seals nothing.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from pathlib import Path

from lake_platform import owner_only
from lake_platform.errors import SettingsError
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import KEY_ID

FILE_NAME = "flight-keys"
MODE = 0o600
_MIN_KEY_BYTES = 32


def key_file_path(home: Path) -> Path:
    return Path(home).expanduser() / FILE_NAME


def new_key() -> tuple[str, bytes]:
    # The id sorts by creation time, which tells an operator which keys are old.
    return f"k{int(time.time())}-{secrets.token_hex(3)}", secrets.token_bytes(32)


def read_keys(path: Path) -> list[tuple[str, bytes]]:
    """The ring in ``path``, oldest first; SettingsError if it is unsafe or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise  # load_or_create creates it; every other failure is the operator's to fix
    except OSError as exc:
        raise SettingsError(f"sealing key file {path}: cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SettingsError(f"sealing key file {path}: not a regular file")
        if info.st_mode & 0o077:
            raise SettingsError(
                f"sealing key file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users read "
                f"or write it; it must be 0600 (chmod 600 {path}; "
                "rotate the keys if others may have read it)"
            )
        raw = f.read(1 << 20)
    return parse_keys(raw, path)


def parse_keys(raw: bytes, path: Path) -> list[tuple[str, bytes]]:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SettingsError(f"sealing key file {path}: not text") from None
    keys: list[tuple[str, bytes]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        kid, sep, material = (p.strip() for p in line.partition(":"))
        where = f"sealing key file {path}, line {number}"
        if not sep or not KEY_ID.fullmatch(kid):
            raise SettingsError(
                f"{where}: expected 'kid:hex' with a key id of letters, digits, '.', '_', '-'"
            )
        try:
            key = bytes.fromhex(material)
        except ValueError:
            raise SettingsError(f"{where}: the key of {kid!r} is not hex") from None
        if len(key) < _MIN_KEY_BYTES:
            raise SettingsError(f"{where}: the key of {kid!r} must be at least 32 bytes (64 hex digits)")
        if any(kid == known for known, _ in keys):
            raise SettingsError(f"{where}: key id {kid!r} appears twice")
        keys.append((kid, key))
    if not keys:
        raise SettingsError(f"sealing key file {path}: holds no key")
    return keys


def _format(keys: list[tuple[str, bytes]]) -> bytes:
    return "".join(f"{kid}:{key.hex()}\n" for kid, key in keys).encode("ascii")


def _write_temp(path: Path, data: bytes) -> Path:
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE)
    try:
        os.fchmod(fd, MODE)  # the umask can only narrow the mode; make it exact anyway
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return temp


def load_or_create(path: Path) -> list[tuple[str, bytes]]:
    """The ring in ``path``, creating the file with one new key if there is none."""
    try:
        return read_keys(path)
    except FileNotFoundError:
        pass
    owner_only.make_dir(path.parent)
    temp = _write_temp(path, _format([new_key()]))
    try:
        os.link(temp, path)  # fails if another endpoint created it first: then read theirs
    except FileExistsError:
        pass
    finally:
        temp.unlink(missing_ok=True)
    return read_keys(path)


def rotate(path: Path) -> str:
    """Append a new key (it seals from the next start on; the older ones still open). Returns its id."""
    keys = load_or_create(path)
    kid, key = new_key()
    _replace(path, [*keys, (kid, key)])
    return kid


def retire(path: Path, keep: int) -> list[str]:
    """Drop all but the newest ``keep`` keys; returns the ids dropped."""
    if keep < 1:
        raise SettingsError("keep: at least one key (the one that seals) must stay")
    keys = read_keys(path)
    dropped = [kid for kid, _ in keys[:-keep]]
    if dropped:
        _replace(path, keys[-keep:])
    return dropped


def _replace(path: Path, keys: list[tuple[str, bytes]]) -> None:
    temp = _write_temp(path, _format(keys))
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def endpoint_keys(configured: list[tuple[str, bytes]], lake: LakeSettings) -> list[tuple[str, bytes]] | None:
    """The ring an endpoint seals with: the configured keys if any (they win); else, on the
    embedded SQLite registry, the home's key file; else None (a random key for this process,
    since replicas of a shared registry do not share a home)."""
    if configured:
        return configured
    if not lake.registry_url.startswith("sqlite:///"):
        return None
    return load_or_create(key_file_path(lake.home))
