"""Optional OpenTelemetry spans (``--otel-spans``, the ``otel`` extra); off by default.

When on, every request is a ``proxy.request`` span (its parent taken from the client's
``traceparent``), with children ``proxy.queue`` (waiting for a slot), ``proxy.route`` (the
policy's decision) and ``proxy.upstream`` (one attempt on a replica); the replica gets the
request span's own ``traceparent``, so its spans nest under the proxy's. Spans carry the request
id, the route's reason, the replica and the HTTP status. When off, none of this is on the
request path: the forwarder takes its untraced steps (``Forwarder._forward`` branches on
whether a tracer was given; the traced steps are ``_traced_acquire`` and ``_traced_attempt``).

``tracer_from_environment`` builds the SDK's tracer with an OTLP/HTTP exporter configured by the
standard ``OTEL_*`` variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from proxy.config.programs import install_hint

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

INSTRUMENTATION = "rollout-proxy"


class OtelMissing(RuntimeError):
    """--otel-spans without the otel extra installed."""


def require_otel() -> None:
    """Raise ``OtelMissing`` (saying what to install) unless the otel extra is installed."""
    _sdk()


def tracer_from_environment() -> Tracer:
    OTLPSpanExporter, Resource, TracerProvider, BatchSpanProcessor = _sdk()
    provider = TracerProvider(resource=Resource.create({"service.name": INSTRUMENTATION}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer: Tracer = provider.get_tracer(INSTRUMENTATION)
    return tracer


def _sdk() -> tuple[Any, Any, Any, Any]:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:  # the optional extra: say what to install
        raise OtelMissing(
            f"--otel-spans needs the otel extra: {install_hint('otel')} ({exc.name} is missing)"
        ) from None
    return OTLPSpanExporter, Resource, TracerProvider, BatchSpanProcessor


class Spans:
    """The proxy's spans on one tracer."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def request(self, headers: Any, method: str, path: str) -> Iterator[tuple[Span, bytes]]:
        """The request span, and the ``traceparent`` header line for the replica."""
        from opentelemetry.propagate import extract, inject

        with self._tracer.start_as_current_span(
            "proxy.request",
            context=extract(dict(headers)),
            attributes={"http.request.method": method, "url.path": path},
        ) as span:
            carrier: dict[str, str] = {}
            inject(carrier)
            line = "".join(f"{k}: {v}\r\n" for k, v in carrier.items() if k == "traceparent")
            yield span, line.encode("ascii")

    def span(self, name: str, **attributes: Any) -> AbstractContextManager[Span]:
        """A child span of the current one (the data plane's ``Tracing`` protocol)."""
        return self._tracer.start_as_current_span(name, attributes=attributes)
