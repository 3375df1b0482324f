"""Reading a shell launch script as bash would expand it, enough to find a trainer's arguments.

A launch script (Megatron-LM's ``examples/*/train_*.sh`` and the scripts teams write like them) is read
line by line: continued lines joined, comments dropped, ``NAME=value``, ``NAME=( ... )`` and
``NAME+=( ... )`` assignments kept, ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME[@]}``
and ``$(( ... ))`` expanded where a later line uses them, an unquoted expansion split into words
as bash splits it. The launch is the first line running a ``*.py`` entry point after a launcher
(``torchrun``, ``python``, ``srun``, ...); its words after the entry point are the trainer's
arguments, torchrun's ``--nproc_per_node`` times ``--nnodes`` the device count. Control flow is not
evaluated: every branch's assignments are read in order, the last one winning.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from typing import Any

from hp_core.errors import ConfigError

__all__ = ["parse_megatron_args", "read_megatron_script"]

_VAR = re.compile(r"\$\{(\w+)(\[@\])?(?::-([^}]*))?\}|\$(\w+)")


def parse_megatron_args(tokens: list[str]) -> dict[str, list[str]]:
    """Megatron-LM arguments as ``{flag without dashes: [values]}`` (a flag's last occurrence wins)."""
    args: dict[str, list[str]] = {}
    flag = None
    for token in tokens:
        if token.startswith("--"):
            name, sep, value = token[2:].partition("=")
            flag = name.replace("_", "-")
            args[flag] = [value] if sep else []
        elif flag is not None:
            args[flag].append(token)
    return args


def _words(text: str) -> list[str]:
    """An expansion's words: unquoted, bash splits it at whitespace (an array element such as
    ``"--fp8-format hybrid"`` passed as ``${ARGS[@]}`` is two arguments)."""
    if not re.search(r"\s", text):
        return [text]
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


# $(( ... )) over integers: + - * / % and parentheses (bash integer arithmetic), names read as variables.
_ARITHMETIC = re.compile(r"\$\(\(((?:[^()]|\([^()]*\))*)\)\)")


def _arithmetic(text: str, env: dict[str, Any]) -> str:
    def value(match: re.Match) -> str:
        ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
               ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}

        def walk(node):
            if isinstance(node, ast.Constant) and isinstance(node.value, int):
                return node.value
            if isinstance(node, ast.BinOp) and type(node.op) in ops:
                return ops[type(node.op)](walk(node.left), walk(node.right))
            if isinstance(node, ast.UnaryOp) and type(node.op) in ops:
                return ops[type(node.op)](walk(node.operand))
            raise ValueError(node)

        names = re.sub(r"[A-Za-z_]\w*", lambda m: str(env.get(m.group(0), m.group(0))), match.group(1))
        try:
            return str(walk(ast.parse(names.strip(), mode="eval").body))
        except (ValueError, SyntaxError, ZeroDivisionError):
            return match.group(0)

    return _ARITHMETIC.sub(value, text)


def _substitute(text: str, env: dict[str, Any]) -> str:
    """``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME[@]}`` replaced where *env* holds them (an array
    as its elements joined), then ``$(( ... ))``."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        found = env.get(name)
        if found is None:
            return match.group(3) if match.group(3) is not None else match.group(0)
        return " ".join(found) if isinstance(found, list) else found

    return _arithmetic(_VAR.sub(value, text), env)


def _expand(token: str, env: dict[str, Any]) -> list[str]:
    whole = _VAR.fullmatch(token)
    if whole and whole.group(2) and isinstance(env.get(whole.group(1)), list):
        return [word for item in env[whole.group(1)] for word in _words(item)]
    expanded = _substitute(token, env)
    return _words(expanded) if "$" in token else [expanded]


# What runs a Python entry point (a word before it, its path's last part): a line naming a *.py file
# without one (``if [ ! -f pretrain_gpt.py ]``, ``echo ...``) is not the launch.
_LAUNCHERS = re.compile(r"(torchrun|python[\d.]*|deepspeed|accelerate|srun|mpirun|nsys|uv)$")


def _array_tokens(text: str) -> list[str]:
    """Shell words of *text*, an unquoted ``(`` or ``)`` a word of its own, comments dropped."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="()")
    lexer.whitespace_split, lexer.commenters = True, "#"
    return list(lexer)


def read_megatron_script(text: str) -> tuple[list[str], int | None]:
    """A launch script's Megatron-LM arguments and its device count (torchrun's, where stated)."""
    text = re.sub(r"\\\r?\n", " ", text)
    env: dict[str, Any] = {}
    lines = iter(text.splitlines())
    for line in lines:
        arithmetic = re.match(r"^\s*(?:export\s+)?(\w+)=(\$\(\(.*\)\))\s*(?:#.*)?$", line)
        if arithmetic:  # NAME=$(( ... )), spaces and all
            env[arithmetic.group(1)] = _substitute(arithmetic.group(2), env)
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        if tokens and tokens[0] == "export":
            tokens = tokens[1:]
        array = re.match(r"^\s*(?:export\s+)?(\w+)(\+?)=\(\s*(.*)$", line)
        if array:
            body, items = array.group(3), None
            while items is None:
                try:
                    parts = _array_tokens(body)
                except ValueError:  # a quote spans lines
                    parts = []
                if ")" in parts:
                    items = parts[:parts.index(")")]
                else:
                    following = next(lines, None)
                    if following is None:
                        raise ConfigError("--from megatron", f"the array {array.group(1)}=( ... has no closing ')'")
                    body += "\n" + following
            found = [t for item in items for t in _expand(item, env)]
            previous = env.get(array.group(1)) if array.group(2) else None  # NAME+=( ... ) appends
            env[array.group(1)] = (previous if isinstance(previous, list) else []) + found
            continue
        if len(tokens) == 1 and re.match(r"^\w+=", tokens[0]):
            name, _, value = tokens[0].partition("=")
            env[name] = " ".join(_expand(value, env))
            continue
        expanded = [t for token in tokens for t in _expand(token, env)]
        entry = next((i for i, t in enumerate(expanded) if t.endswith(".py")
                      and any(_LAUNCHERS.match(w.rsplit("/", 1)[-1]) for w in expanded[:i])), None)
        if entry is None:
            continue
        launcher = parse_megatron_args(expanded[:entry])
        per_node = (launcher.get("nproc-per-node") or [None])[0]
        nodes = (launcher.get("nnodes") or ["1"])[0]
        devices = int(per_node) * int(nodes) if per_node and per_node.isdigit() and nodes.isdigit() else None
        return expanded[entry + 1:], devices
    raise ConfigError("--from megatron", "found no line running a *.py entry point (pretrain_gpt.py ...) in the script")
