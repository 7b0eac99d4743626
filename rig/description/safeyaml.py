"""Reading a user's YAML file without trusting it: size-capped bytes from a regular file,
strict UTF-8, and a loader that refuses aliases/anchors, merge keys and duplicate keys
and caps nesting depth. Every failure is one InputError naming the file.

Why: an alias bomb expands to gigabytes, 500 levels of nesting overflow the composer's
recursion, a FIFO or /dev/zero never ends, a duplicate key silently drops a value.

Pure description layer: imports only yaml, rig.errors and rig.description.limits.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, NodeEvent
from yaml.nodes import MappingNode

from rig.description import limits as L
from rig.errors import InputError

_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"),
         (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"),
         (b"\xef\xbb\xbf", "UTF-8 with a byte-order mark"))


def read_text(path: str | Path, *, max_bytes: int = L.MAX_FILE_BYTES) -> str:
    """The file's text: a regular file of at most max_bytes, strict UTF-8 without BOM."""
    where = str(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read ({getattr(e, 'strerror', None) or e})", file=where) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a FIFO, device or directory cannot be a "
                         "scenario)", file=where)
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after stat, open does not wait
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", file=where) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("not a regular file", file=where)
        chunks, total = [], 0
        while total <= max_bytes:
            b = os.read(fd, max_bytes + 1 - total)
            if not b:
                break
            chunks.append(b)
            total += len(b)
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror})", file=where) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise InputError(f"larger than {max_bytes >> 10} KiB: not a scenario", file=where)
    return decode(data, where)


def decode(data: bytes, where: str) -> str:
    for bom, enc in _BOMS:
        if data.startswith(bom):
            raise InputError(f"file is {enc}: save it as UTF-8 without a byte-order mark",
                             file=where)
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                         "save the file as UTF-8", file=where) from None


class StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases, anchors, merge keys or duplicate keys, and with a
    nesting limit (checked before the composer recurses)."""

    max_depth = L.MAX_YAML_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise ComposerError(None, None, "aliases (*name) are not allowed here",
                                event.start_mark)
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise ComposerError(None, None, "anchors (&name) are not allowed here",
                                event.start_mark)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise ComposerError(None, None, f"nested deeper than {self.max_depth} levels",
                                    event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise ConstructorError(None, None, "merge keys (<<) are not allowed here",
                                           key_node.start_mark)
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    continue        # unhashable: the base class reports it
                if dup:
                    raise ConstructorError(None, None, f"duplicate key {str(key)[:40]!r}",
                                           key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load(text: str, where: str) -> Any:
    """Parse one YAML document with StrictLoader; errors are one line with the line."""
    try:
        loader = StrictLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.reader.ReaderError as e:
        ch = e.character if isinstance(e.character, int) else ord(e.character)
        raise InputError(f"character #x{ch:04x} at position {e.position} is not allowed in "
                         "YAML", file=where) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where_line = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{where_line}not valid YAML ({problem})", file=where) from None
    except (ValueError, OverflowError) as e:
        # an int of 5000 digits, a timestamp in month 13: the constructor's own errors
        raise InputError(f"not valid YAML ({e})", file=where) from None
