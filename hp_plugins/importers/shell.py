"""Reading a shell launch script as bash would expand it, enough to find a trainer's arguments.

A launch script (Megatron-LM's ``examples/*/train_*.sh`` and the scripts teams write like them) is read
line by line: continued lines joined, a quote left open joined to the lines that close it, comments
dropped, ``NAME=value``, ``NAME+=value``, ``NAME=( ... )`` and ``NAME+=( ... )`` assignments kept
(``export``, ``declare``, ``local`` and their options before them), ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME[@]}``
and ``$(( ... ))`` expanded where a later line uses them, an unquoted expansion split into words
as bash splits it. The launch is the first line running ``pretrain*.py`` or ``train*.py`` after a
launcher (``torchrun``, ``python``, ``srun``, ``exec``, ...), else the first running any ``*.py``,
else the first naming one outside a test or a message (``./pretrain_gpt.py``, ``$PYTHON
pretrain_gpt.py`` with ``PYTHON`` unset); its words after the entry point are the trainer's
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


# $(( ... )) over integers: + - * / % ** and parentheses (bash integer arithmetic), $NAME and bare names read
# as variables.
_ARITHMETIC = re.compile(r"\$\(\(((?:[^()]|\([^()]*\))*)\)\)")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
        ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.operand))
    raise ValueError(node)


def _variable(match: re.Match, env: dict[str, Any]) -> str:
    """One ``_VAR`` match's value: an array's elements joined, a default, or the text as it was."""
    found = env.get(match.group(1) or match.group(4))
    if found is None:
        return match.group(3) if match.group(3) is not None else match.group(0)
    return " ".join(found) if isinstance(found, list) else found


def _arithmetic(text: str, env: dict[str, Any]) -> str:
    def value(match: re.Match) -> str:
        inner = _VAR.sub(lambda m: _variable(m, env), match.group(1))
        names = re.sub(r"[A-Za-z_]\w*", lambda m: str(env.get(m.group(0), m.group(0))), inner)
        try:
            return str(_evaluate(ast.parse(names.strip(), mode="eval").body))
        except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
            return match.group(0)

    return _ARITHMETIC.sub(value, text)


def _substitute(text: str, env: dict[str, Any]) -> str:
    """``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME[@]}`` replaced where *env* holds them (an array
    as its elements joined), then ``$(( ... ))``."""
    return _arithmetic(_VAR.sub(lambda m: _variable(m, env), text), env)


def _expand(token: str, env: dict[str, Any]) -> list[str]:
    whole = _VAR.fullmatch(token)
    if whole and whole.group(2) and isinstance(env.get(whole.group(1)), list):
        return [word for item in env[whole.group(1)] for word in _words(item)]
    expanded = _substitute(token, env)
    return _words(expanded) if "$" in token else [expanded]


# What runs a Python entry point (a word before it, its path's last part). A line naming a *.py file
# without one is a launch only where no line has one, and never a test or a message
# (``if [ ! -f pretrain_gpt.py ]``, ``echo ...``).
_LAUNCHERS = re.compile(r"(torchrun|python[\d.]*|deepspeed|accelerate|srun|mpirun|nsys|uv|exec)$")
_NOT_LAUNCHES = frozenset("if elif while until [ [[ test echo printf cat ls cp mv rm mkdir cd source . chmod for case "
                          "git wget curl pip".split())
# Assignment prefixes: export, declare/typeset/local/readonly with their options.
_PREFIX = r"^\s*(?:(?:export|declare|typeset|local|readonly)(?:\s+-\w+)*\s+)?"


def _array_tokens(text: str) -> list[str]:
    """Shell words of *text*, an unquoted ``(`` or ``)`` a word of its own, comments dropped."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="()")
    lexer.whitespace_split, lexer.commenters = True, "#"
    return list(lexer)


def _logical_lines(text: str):
    """The script's lines, continued lines joined and a line whose quote is left open joined to the next until it
    closes (``GPT_ARGS="`` over several lines)."""
    lines = iter(re.sub(r"\\\r?\n", " ", text).splitlines())
    for line in lines:
        for _ in range(500):
            try:
                shlex.split(line, comments=True)
                break
            except ValueError:
                following = next(lines, None)
                if following is None:
                    break
                line += "\n" + following
        yield line, lines


def read_megatron_script(text: str, environment: dict[str, str] | None = None) -> tuple[list[str], int | None]:
    """A launch script's Megatron-LM arguments and its device count (torchrun's, where stated): the first line
    launching ``pretrain*.py``/``train*.py``, else the first launching any ``*.py``, else the first naming one.
    *environment*, where given, receives the script's variables as their last assignment left them (arrays left
    out): ``export CUBLAS_WORKSPACE_CONFIG=...`` among them."""
    env: dict[str, Any] = {}
    launched: list[tuple[int, int, int, list[str]]] = []  # (preference, line number, entry's index, expanded words)
    for number, (line, lines) in enumerate(_logical_lines(text)):
        line = _arithmetic(line, env)  # $(( ... )) as bash evaluates it before splitting words
        array = re.match(_PREFIX + r"(\w+)(\+?)=\(\s*(.*)$", line, re.S)
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
                    body += "\n" + _arithmetic(following, env)
            found = [t for item in items for t in _expand(item, env)]
            previous = env.get(array.group(1)) if array.group(2) else None  # NAME+=( ... ) appends
            env[array.group(1)] = (previous if isinstance(previous, list) else []) + found
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        while tokens and re.fullmatch(r"export|declare|typeset|local|readonly|-\w+", tokens[0]):
            tokens = tokens[1:]
        assignment = re.match(r"^(\w+)(\+?)=(.*)$", tokens[0], re.S) if len(tokens) == 1 else None
        if assignment:
            value = " ".join(_expand(assignment.group(3), env))
            previous = env.get(assignment.group(1)) if assignment.group(2) else None  # NAME+="..." appends
            env[assignment.group(1)] = (" ".join(previous) if isinstance(previous, list) else previous or "") + value
            continue
        expanded = [t for token in tokens for t in _expand(token, env)]
        for i, word in enumerate(expanded):
            if not word.endswith(".py"):
                continue
            name = word.rsplit("/", 1)[-1]
            if any(_LAUNCHERS.match(w.rsplit("/", 1)[-1]) for w in expanded[:i]):
                launched.append((0 if re.match(r"(pre)?train", name) else 1, number, i, expanded))
            elif tokens[0] not in _NOT_LAUNCHES and expanded[i + 1:i + 2] not in (["]"], ["]]"]):
                launched.append((2, number, i, expanded))
            else:
                continue
            break
    if not launched:
        raise ConfigError("--from megatron", "found no line running a *.py entry point (pretrain_gpt.py ...) in the script")
    if environment is not None:
        environment.update({name: value for name, value in env.items() if isinstance(value, str)})
    _, _, entry, expanded = min(launched)
    launcher = parse_megatron_args(expanded[:entry])
    per_node = (launcher.get("nproc-per-node") or [None])[0]
    nodes = (launcher.get("nnodes") or ["1"])[0]
    devices = int(per_node) * int(nodes) if per_node and per_node.isdigit() and nodes.isdigit() else None
    return expanded[entry + 1:], devices
