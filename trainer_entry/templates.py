"""The response template TRL's rollout worker needs, for chat templates TRL does not know.

TRL's rollout worker parses each completion with the tokenizer's ``response_template`` (how an
assistant turn opens and closes). When the tokenizer has none, it calls
``trl.chat_template_utils.add_response_schema``, which knows only the exact template texts TRL
bundles and raises "Unrecognized chat template" for anything else: Qwen2.5-Math among them (its
template is Qwen2.5's with another default system prompt). ``ensure_response_template`` sets one
before TRL looks:

1. the tokenizer already has one, or TRL recognises its template: nothing to do;
2. ``--response-template`` names a family or a JSON file: that one;
3. the template's own markers tell its family: ChatML (``<|im_start|>``/``<|im_end|>``: Qwen,
   Qwen2.5-Math, SmolLM, ...) or Llama 3 (``<|start_header_id|>``/``<|eot_id|>``);
4. otherwise it stops with a message naming the model and the flag.

Families are TRL's own response templates where TRL has one for them (``qwen3_template`` is
ChatML's, with ``<think>`` and ``<tool_call>`` parsing), so a detected template parses exactly as
a recognised one would.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("trainer_entry")

# Marker pairs that identify a family from a template's text, checked in order.
_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
)
FAMILIES = tuple(name for name, _ in _MARKERS)


class TemplateError(ValueError):
    """No response template could be found; the message says which flag to pass."""


def family_of(chat_template: str | None) -> str | None:
    """The family a chat template's text belongs to, from its markers; None if none fits."""
    if not chat_template:
        return None
    for name, markers in _MARKERS:
        if all(marker in chat_template for marker in markers):
            return name
    return None


def family_template(name: str) -> dict[str, Any]:
    """TRL's response template for a family."""
    from trl import chat_template_utils as trl_templates

    templates = {"chatml": trl_templates.qwen3_template, "llama3": trl_templates.llama3_template}
    return dict(templates[name])


def read_template(spec: str) -> dict[str, Any]:
    """``--response-template``: a family name, or a JSON file holding a response template."""
    if spec in FAMILIES:
        return family_template(spec)
    path = Path(spec)
    if not path.is_file():
        raise TemplateError(
            f"--response-template {spec!r}: neither a family ({', '.join(FAMILIES)}) nor a file"
        )
    try:
        loaded = json.loads(path.read_text())
    except ValueError as exc:
        raise TemplateError(f"--response-template {spec}: not JSON ({exc})") from exc
    if not isinstance(loaded, dict) or "fields" not in loaded:
        raise TemplateError(f"--response-template {spec}: a JSON object with 'fields' expected")
    return loaded


def ensure_response_template(tokenizer: Any, model: str, spec: str | None = None) -> str:
    """Give ``tokenizer`` a response template TRL's rollout worker accepts; returns where it came
    from (``"tokenizer"``, ``"trl"``, ``"flag"`` or a family name). Raises ``TemplateError``."""
    if spec is not None:
        tokenizer.response_template = read_template(spec)
        log.info("response template for %s from --response-template %s", model, spec)
        return "flag"
    if getattr(tokenizer, "response_template", None) is not None:
        return "tokenizer"
    from trl.chat_template_utils import add_response_schema

    try:
        add_response_schema(tokenizer)
        return "trl"
    except ValueError:
        pass  # TRL does not know this exact template text; try its family
    family = family_of(getattr(tokenizer, "chat_template", None))
    if family is None:
        raise TemplateError(
            f"TRL does not recognise the chat template of {model} and its family could not be "
            f"told from it: pass --response-template with one of {', '.join(FAMILIES)} or a JSON "
            "file (transformers' response_template format)"
        )
    tokenizer.response_template = family_template(family)
    log.warning(
        "TRL does not recognise the chat template of %s; it is %s by its markers, so the %s "
        "response template is used (--response-template overrides)",
        model,
        family,
        family,
    )
    return family
