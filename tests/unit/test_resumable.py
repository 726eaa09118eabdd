"""The plan of a streamed request (``proxy.dataplane.resumable``) read without parsing its prompt:
the same decisions as on the whole body, and the ids asked for by a splice."""

from __future__ import annotations

import orjson
import pytest

from proxy.dataplane.resumable import resumable


@pytest.mark.parametrize(
    ("body", "continued"),
    [
        (b'{"prompt": [1, 2,3] , "stream": true}', True),
        (b'{"stream":true,"prompt":[1,2,3],"n":2}', False),
        (b'{"stream":true,"prompt":"a text"}', True),
        (b'{"stream":true,"prompt":[[1,2]]}', True),  # one prompt of ids in a list
        (b'{"stream":true,"prompt":[[1,2],[3]]}', False),  # two prompts
        (b'{"stream":true,"prompt":["a","b"]}', False),
        (b'{"vllm_xargs":{"prompt":[1]},"prompt":[[1],[2]],"stream":true}', False),
        (b'{"prompt":[1],"stream":true,"prompt":[[1],[2]]}', False),  # the last key wins
        (b'{"prompt":[1],"stream":true,"stop":["\\n"]}', False),
        (b'{"prompt":[1],"stream":false}', False),
        (b'{"prompt":[1,"stream":true}', False),  # not JSON: the replica answers it
    ],
)
def test_the_decision_is_the_whole_bodys(body: bytes, continued: bool) -> None:
    """Fails when a nested or earlier ``prompt`` decides for the request's own (several
    prompts share one stream: not continued), or a malformed body is planned."""
    assert (resumable("completions", body) is not None) is continued


def test_the_ids_are_asked_for_by_a_splice_that_leaves_the_rest_as_it_came() -> None:
    """Fails when the splice breaks the JSON (trailing whitespace, the closing brace kept) or
    the plan keeps another body than the one sent."""
    body = b'{"model":"m", "prompt":[1, 2], "stream":true, "logprobs":1}\n'
    found = resumable("completions", body)
    assert found is not None
    plan, sent = found
    assert sent == body.rstrip()[:-1] + b',"return_token_ids":true}'
    assert plan.body == sent
    assert orjson.loads(sent) == {**orjson.loads(body), "return_token_ids": True}


@pytest.mark.parametrize("value", [b"false", b"null", b"0"])
def test_a_client_that_said_no_to_ids_is_asked_for_them_once(value: bytes) -> None:
    """Fails when the ids are spliced in beside the client's own ``return_token_ids`` (a
    duplicate key: which one counts is the parser's choice)."""
    found = resumable(
        "completions", b'{"prompt":[1],"stream":true,"return_token_ids":' + value + b"}"
    )
    assert found is not None
    plan, sent = found
    assert not plan.wants_ids
    assert sent.count(b'"return_token_ids"') == 1
    assert orjson.loads(sent)["return_token_ids"] is True
