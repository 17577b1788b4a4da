"""Module names from before the layout by concern, still importable: ``atlasbus.connection``
is ``atlasbus.bus.connection`` (the same module object), and so on for every module moved.

``import atlasbus`` installs the finder; it answers for these names alone. ``atlasbus.planning``
is now the planning package: its module is ``atlasbus.planning.batch_plan``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

FORMER_NAMES = {
    "ascii_text": "decoding.kernels.ascii_text",
    "cli_common": "cli.common",
    "column_page": "decoding.cut_pages",
    "compact_cli": "cli.compact",
    "compiled": "decoding.kernels.compiler",
    "compiled_kernels": "decoding.kernels.selection",
    "connection": "bus.connection",
    "data_loss": "planning.data_loss",
    "decode": "decoding.decoder",
    "dlq_cli": "cli.dlq",
    "encode": "publishing.encoder",
    "entry_id": "model.entry_id",
    "envelope": "wire.envelope",
    "flat_json_maps": "decoding.kernels.flat_json_maps",
    "gc_pause": "bus.gc_pause",
    "hiredis_pages": "reading.hiredis_receiver",
    "id_times": "decoding.kernels.id_times",
    "json_object_column": "decoding.kernels.json_objects",
    "json_objects": "wire.json_object_check",
    "json_scan": "decoding.kernels.json_lexer",
    "kernel_warmup": "decoding.kernels.warmup",
    "lag": "operations.lag",
    "offsets": "model.offsets",
    "option_keys": "options.keys",
    "option_reader": "options.reader",
    "pacing": "planning.pacing",
    "page_columns": "decoding.wanted_fields",
    "pair_fields": "decoding.kernels.pick_fields",
    "pending": "operations.pending",
    "plain_numbers": "decoding.kernels.plain_numbers",
    "positions": "planning.positions",
    "publisher": "publishing.publisher",
    "raw_field_column": "decoding.kernels.raw_field_maps",
    "raw_fields": "wire.raw_text",
    "read_ahead": "reading.read_ahead",
    "reader": "reading.range_reader",
    "reaper": "operations.reaper",
    "reasons": "model.reason_codes",
    "redis_glob": "bus.redis_glob",
    "retention": "operations.retention",
    "schema": "model.read_schema",
    "sink_columns": "options.sink_columns",
    "sink_options": "options.sink",
    "source_options": "options.source",
    "status": "operations.bus_status",
    "status_cli": "cli.status",
    "status_report": "cli.status_report",
    "stream_plan": "model.stream_plan",
    "streams": "bus.stream_catalog",
    "trim_cli": "cli.trim",
    "values": "model.conversions",
    "xrange_pages": "reading.reply_receiver",
    "xrange_pairs": "decoding.kernels.cut_any_layout",
    "xrange_reply": "decoding.kernels.cut_one_layout",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran under its own name already."""


class FormerNames(importlib.abc.MetaPathFinder):
    """Finds ``atlasbus.<former name>`` as the module that now holds it."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != "atlasbus" or name not in FORMER_NAMES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"atlasbus.{FORMER_NAMES[name]}"))


def install() -> None:
    if not any(isinstance(finder, FormerNames) for finder in sys.meta_path):
        sys.meta_path.append(FormerNames())
