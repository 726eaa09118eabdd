"""OpenTelemetry spans (--otel-spans): a request span under the client's traceparent, with
queue, route and upstream children, and the replica given the request span as its parent."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.calls import completion, post
from tests.support.fleet import run_stack
from tests.support.scripted import MODEL, ok, scripted

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE}-b7ad6b7169203331-01"


async def test_spans_nest_under_the_clients_trace_and_the_replica_continues_it() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with (
        scripted(lambda n: [ok(b"{}")], replica=True) as replica,
        run_stack(0, extra=(replica.url,), tracer=tracer) as stack,
    ):
        status, _, headers = await post(
            stack, "/v1/completions", completion(model=MODEL), headers={"traceparent": PARENT}
        )
        assert status == 200
    spans = {span.name: span for span in exporter.get_finished_spans()}
    request = spans["proxy.request"]
    assert f"{request.context.trace_id:032x}" == TRACE
    assert request.attributes is not None
    assert request.attributes["rollout.request_id"] == headers["X-Request-ID"]
    for child in ("proxy.queue", "proxy.route", "proxy.upstream"):
        assert spans[child].parent is not None, child
        assert spans[child].context.trace_id == request.context.trace_id
    upstream = spans["proxy.upstream"]
    assert upstream.attributes is not None and upstream.attributes["rollout.replica"]
    sent = replica.requests[-1].decode()
    assert f"traceparent: 00-{TRACE}-{request.context.span_id:016x}-01" in sent


async def test_without_a_tracer_there_are_no_spans_and_no_traceparent_invented() -> None:
    async with (
        scripted(lambda n: [ok(b"{}")], replica=True) as replica,
        run_stack(0, extra=(replica.url,)) as stack,
    ):
        await post(stack, "/v1/completions", completion(model=MODEL))
        assert "traceparent" not in replica.requests[-1].decode()
