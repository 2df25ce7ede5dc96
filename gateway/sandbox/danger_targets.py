"""What dangerous commands aim at: the root and home directories, system directories, block
devices, credential files, and the programs (shells, downloaders, network tools) that the rules
of exec mediation look for. Pure functions over words; no file system access.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache
from typing import Literal

from agent_core.tools import glob_to_regex

PathKind = Literal["root", "home", "system_top", "system", "var_prefix", "parent", "other"]

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "rbash"})
_INTERPRETER = re.compile(
    r"^(?:python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*|"
    r"deno|bun|pwsh|powershell|osascript|Rscript)$"
)
DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request", "GET"})
NETWORK_TOOLS = frozenset(
    {"nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "telnet", "socat", "openssl", "cryptcat"}
)
SOURCING = frozenset({"eval", "source", "."})

SYSTEM_DIRS = frozenset(
    {
        "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
        "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/usr", "/var", "/mnt", "/media",
        "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share",
        "/usr/include", "/var/lib", "/var/log", "/System", "/Library", "/Applications", "/Users",
        "/private",
    }
)  # fmt: skip

_HOME_PREFIX = re.compile(r"^(?:~[A-Za-z0-9._-]*|\$HOME|\$\{HOME\})(?=/|$)")
_VAR_PREFIX = re.compile(r"^\$(?:\{[A-Za-z_][A-Za-z0-9_]*[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")
_PURE_GLOB = re.compile(r"(?:\*|\?|\.|\[[^\]]*\])+")
_GLOB_CHARS = re.compile(r"[*?\[]")
_FAKE_HOME = "/home/~"
"""Stand-in for the home directory while normalising, so ``~/..`` resolves to ``/home``."""

_DEVICE = re.compile(
    r"^/dev/(?:sd[a-z]+\d*|hd[a-z]+\d*|vd[a-z]+\d*|xvd[a-z]+\d*|nvme\d+(?:n\d+)?(?:p\d+)?|"
    r"mmcblk\d+(?:p\d+)?|md\d+|dm-\d+|loop\d+|sr\d+|nbd\d+|r?disk\d+(?:s\d+)?|mapper/.+|disk/.+|"
    r"root|mem|kmem|port)$"
)
_DEVICE_EXAMPLES = ("/dev/sda", "/dev/sda1", "/dev/nvme0n1", "/dev/vda", "/dev/xvda", "/dev/mmcblk0")

_HOME_DIR = r"(?:^~|^/root|^/home/[^/]+|^/Users/[^/]+)"
_CREDENTIALS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), label)
    for pattern, label in (
        (r"(?:^|/)\.ssh/(?:id_(?![^/]*\.pub$)[^/]*|identity)$", "an SSH private key"),
        (r"(?:^|/)\.ssh/authorized_keys2?$", "SSH authorized_keys"),
        (r"(?:^|/)\.ssh/?$", "the SSH key directory"),
        (r"(?:^|/)\.aws(?:/(?:credentials|config))?/?$", "AWS credentials"),
        (r"^/etc/(?:g?shadow-?|sudoers|master\.passwd|security/opasswd)$", "the system password database"),
        (r"(?:^|/)[._]netrc$", "a .netrc password file"),
        (r"(?:^|/)\.pgpass$", "a PostgreSQL password file"),
        (r"(?:^|/)\.git-credentials$", "git credentials"),
        (r"(?:^|/)\.gnupg(?:/|$)", "the GnuPG keyring"),
        (r"(?:^|/)\.password-store(?:/|$)", "the password store"),
        (r"(?:^|/)\.vault-token$", "a Vault token"),
        (r"(?:^|/)\.config/gcloud(?:/|$)", "Google Cloud credentials"),
        (r"(?:^|/)\.azure(?:/|$)", "Azure credentials"),
        (_HOME_DIR + r"/\.docker/config\.json$", "Docker registry credentials"),
        (_HOME_DIR + r"/\.kube/config$", "Kubernetes credentials"),
        (_HOME_DIR + r"/\.(?:npmrc|pypirc)$", "a package registry token file"),
        (r"^/proc/[^/]+/(?:task/[^/]+/)?(?:environ|mem)$", "another process's environment or memory"),
    )
)
_ANY_CREDENTIAL = re.compile("|".join(f"(?:{pattern.pattern})" for pattern, _ in _CREDENTIALS))
"""Matches where any of `_CREDENTIALS` does: one search rules most words out."""
_CREDENTIAL_EXAMPLES = (
    ("~/.ssh/id_rsa", "an SSH private key"),
    ("~/.ssh/id_ed25519", "an SSH private key"),
    ("~/.aws/credentials", "AWS credentials"),
    ("/etc/shadow", "the system password database"),
    ("~/.netrc", "a .netrc password file"),
    ("~/.git-credentials", "git credentials"),
)


_MATCHES_NOTHING = re.compile(r"(?!)")


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(glob_to_regex(pattern), re.DOTALL)
    except re.error:  # a reversed range such as ``[y-<]``: bash's glob matches no file with it
        return _MATCHES_NOTHING


def glob_matches(pattern: str, path: str) -> bool:
    """Shell glob semantics: ``*`` and ``?`` stay within one path component and do not match a
    leading dot (``~/*`` does not reach ``~/.netrc``)."""
    if len(pattern) > 256:
        return False  # no credential or device path is that long; skip a costly regex
    pattern_parts, path_parts = re.sub(r"\*+", "*", pattern).split("/"), path.split("/")
    if len(pattern_parts) != len(path_parts):
        return False
    for pattern_part, path_part in zip(pattern_parts, path_parts, strict=True):
        if path_part.startswith(".") and not pattern_part.startswith("."):
            return False
        if _glob_regex(pattern_part).fullmatch(path_part) is None:
            return False
    return True


def is_interpreter(name: str) -> bool:
    return _INTERPRETER.match(name) is not None


def has_glob(word: str) -> bool:
    return _GLOB_CHARS.search(word) is not None


def expand_braces(word: str, limit: int = 64) -> list[str]:
    """Brace expansion of ``{a,b}`` lists (no ranges), capped at `limit` results; words longer
    than 256 characters are left as they are."""
    if len(word) > 256 or "{" not in word:
        return [word]
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if match is None:
        return [word]
    results: list[str] = []
    for choice in match.group(1).split(","):
        for expanded in expand_braces(word[: match.start()] + choice + word[match.end() :], limit):
            if len(results) >= limit:
                return results
            results.append(expanded)
    return results


def path_kind(word: str) -> tuple[PathKind, str]:
    """What a path argument points at, and its normalised form.

    Home forms (``~``, ``~user``, ``$HOME``, ``${HOME}``) count as the home directory; trailing
    glob components count as the directory itself (``/*`` is the root); ``..`` is resolved.
    """
    text = word
    home = _HOME_PREFIX.match(text)
    if home:
        text = _FAKE_HOME + text[home.end() :]
    elif "$(" in text:
        return "var_prefix", word
    elif (variable := _VAR_PREFIX.match(text)) is not None:
        rest = text[variable.end() :]
        return ("var_prefix", word) if rest.startswith("/") else ("other", word)
    if not text.startswith("/"):
        norm = posixpath.normpath(text) if text else "."
        return ("parent", norm) if norm == ".." or norm.startswith("../") else ("other", norm)
    parts = text.split("/")
    while len(parts) > 1 and (
        parts[-1] == "" or (_PURE_GLOB.fullmatch(parts[-1]) and parts[-1] not in (".", ".."))
    ):
        parts.pop()
    norm = "/" + posixpath.normpath("/".join(parts) or "/").lstrip("/")
    if norm == "/":
        return "root", norm
    if norm == _FAKE_HOME:
        return "home", "~"
    if norm.startswith(_FAKE_HOME + "/"):
        return "other", "~" + norm[len(_FAKE_HOME) :]
    if norm in SYSTEM_DIRS:
        return "system_top", norm
    if any(norm.startswith(top + "/") for top in SYSTEM_DIRS):
        return "system", norm
    return "parent", norm  # an absolute path elsewhere: outside the working directory too


def is_device(word: str) -> bool:
    """A block or memory device (``/dev/sda``, ``/dev/nvme0n1p2``, ``/dev/mem``), globs included."""
    path = "/" + posixpath.normpath(word).lstrip("/") if word.startswith("/") else word
    if _DEVICE.match(path):
        return True
    return (
        path.startswith("/dev/") and has_glob(path) and any(glob_matches(path, d) for d in _DEVICE_EXAMPLES)
    )


@lru_cache(maxsize=4096)
def credential_label(word: str) -> str | None:
    """What credential file `word` names, if any (``--key=~/.ssh/id_rsa`` and globs included)."""
    home = _HOME_PREFIX.match(word)
    text = "~" + word[home.end() :] if home else word
    candidates = [_normal(text), *(_normal(part) for part in re.split(r"[=:,@]", text)[1:])]
    for candidate in candidates:
        if _ANY_CREDENTIAL.search(candidate):
            for pattern, label in _CREDENTIALS:
                if pattern.search(candidate):
                    return label
        if has_glob(candidate):
            for example, label in _CREDENTIAL_EXAMPLES:
                if glob_matches(candidate, example) or glob_matches(candidate, example.removeprefix("~/")):
                    return label
    return None


def _normal(path: str) -> str:
    """``/etc/./shadow`` and ``/etc//x/../shadow`` are ``/etc/shadow``; other words are kept."""
    if path.startswith("/") and len(path) <= 4096:
        return "/" + posixpath.normpath(path).lstrip("/")
    if path.startswith("~/") and len(path) <= 4096:
        return "~/" + posixpath.normpath(path[2:]).lstrip("/")
    return path


def split_options(args: list[str]) -> tuple[list[str], list[str]]:
    """Options (words starting with ``-`` before ``--``) and operands."""
    options: list[str] = []
    operands: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            operands.extend(args[index + 1 :])
            break
        if arg.startswith("-") and len(arg) > 1:
            options.append(arg)
        else:
            operands.append(arg)
    return options, operands


def has_short_flag(options: list[str], letters: str) -> bool:
    """Whether a short option cluster (``-rf``) contains any of `letters`."""
    return any(not opt.startswith("--") and any(ch in opt[1:] for ch in letters) for opt in options)
