"""Structured outputs through the official openai client (issue 45): schemas that hold, and
what the grammar's mask costs a decode step, measured in one run.

    ~/.cache/tpc-venv/bin/python bench/structured_outputs.py CKPT [--prompts 4] [--overhead]
        [--no-plain] [--repetition-penalty R] [--tpc PATH] [-- tpc serve flags...]

Five pydantic models (nested objects, arrays, enums, numbers with bounds, optional fields),
each asked through `client.chat.completions.parse(response_format=Model)` with --prompts
prompts of its own (4 each: 20 prompts in all), greedy, max_tokens 256: a parsed object that
pydantic validated counts, anything else (a refusal, an answer cut at the length) fails. The
same prompts without the schema are asked too, and counted where the answer happens to parse
as the model. --repetition-penalty R asks every one of those requests, with the schema and
without, for vLLM's repetition penalty (a client's setting: a small model that loops inside a
string the schema leaves unbounded may otherwise reach max_tokens). --overhead then measures the decode time per output token (vLLM's TPOT: from
the first token to the last, over the tokens after the first) of streamed chat requests with
the Person schema and without any, at concurrency 1 and 8, in one run (alternating, 3 rounds
of each).
"""
import argparse
import os
import statistics
import sys
import threading
import time
from typing import List, Literal, Optional

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402
from pydantic import BaseModel, Field, ValidationError, conlist  # noqa: E402

from prefix_cache import Server, serve_arguments  # noqa: E402  (tpc serve, its flags)


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=120)
    occupation: str


class Address(BaseModel):
    street: str
    city: str
    country: Literal["France", "Germany", "Italy", "Spain", "United Kingdom", "Other"]


class Customer(BaseModel):
    name: str
    address: Address
    vip: bool


class Item(BaseModel):
    product: str
    quantity: int = Field(ge=1, le=100)
    price: float = Field(ge=0)


class Order(BaseModel):
    order_id: int
    items: conlist(Item, min_length=1, max_length=4)


class Recipe(BaseModel):
    title: str
    difficulty: Literal["easy", "medium", "hard"]
    ingredients: List[str] = Field(max_length=6)
    vegetarian: bool


class Event(BaseModel):
    title: str
    attendees: int = Field(ge=0)
    location: Optional[str] = None
    online: Optional[bool] = None


SCHEMAS = [
    (Person, ["Describe a person named Ann.", "Who is a famous scientist?",
              "Tell me about a retired teacher.", "Invent a character for a novel."]),
    (Customer, ["Give me a sample customer from Paris.", "Create a customer record for Bob.",
                "Describe a loyal customer living in Berlin.", "Make up a customer."]),
    (Order, ["An order of two books and a pen.", "Create an order for a birthday party.",
             "What would a grocery order look like?", "Write an order for office supplies."]),
    (Recipe, ["A recipe for pancakes.", "How do I make a tomato salad?",
              "Give me a simple soup recipe.", "A quick dessert recipe."]),
    (Event, ["Plan a team meeting.", "Describe a music festival.", "A small online workshop.",
             "Organize a family dinner."]),
]


def schemas_hold(client, prompts, plain_too, penalty=None):
    held, plain, failures = 0, 0, []
    extra = {"extra_body": {"repetition_penalty": penalty}} if penalty else {}
    for model, questions in SCHEMAS:
        for question in questions[:prompts]:
            messages = [{"role": "user", "content": question}]
            try:
                reply = client.chat.completions.parse(model="ckpt", messages=messages,
                                                      response_format=model, max_tokens=256,
                                                      temperature=0, **extra)
                parsed = reply.choices[0].message.parsed
                if isinstance(parsed, model) and reply.choices[0].finish_reason == "stop":
                    held += 1
                else:
                    failures.append((model.__name__, question, reply.choices[0].finish_reason))
            except (openai.OpenAIError, ValidationError) as e:
                failures.append((model.__name__, question, str(e)[:200]))
            if not plain_too:
                continue
            answer = client.chat.completions.create(model="ckpt", messages=messages,
                                                    max_tokens=256, temperature=0, **extra)
            try:
                model.model_validate_json(answer.choices[0].message.content or "")
                plain += 1
            except ValidationError:
                pass
    return held, plain, failures


def tpot(client, concurrency, schema, rounds=3):
    """The mean decode time per output token of `concurrency` streamed requests at once."""
    values = []
    lock = threading.Lock()

    def one(i):
        extra = {"response_format": {"type": "json_schema", "json_schema": {
            "name": "person", "schema": Person.model_json_schema()}}} if schema else {}
        start, first, count = time.perf_counter(), None, 0
        stream = client.chat.completions.create(
            model="ckpt", stream=True, max_tokens=64, temperature=0, seed=i,
            messages=[{"role": "user", "content": "Describe person number %d." % i}], **extra)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                count += 1
                first = first or time.perf_counter()
        end = time.perf_counter()
        if first and count > 1:
            with lock:
                values.append((end - first) / (count - 1))
        del start

    for _ in range(rounds):
        threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return statistics.mean(values) * 1000


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--no-plain", action="store_true",
                        help="skip the prompts without the schema (conformance/structured.test)")
    args, flags = serve_arguments(parser)  # tpc serve's flags after "--"
    server = Server(args.tpc, args.ckpt, flags)
    try:
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port,
                               api_key="unused", max_retries=0, timeout=600)
        held, plain, failures = schemas_hold(client, args.prompts, not args.no_plain,
                                             args.repetition_penalty)
        total = len(SCHEMAS) * min(args.prompts, 4)
        print("schemas held: %d of %d parsed and valid (max_tokens 256, greedy%s)" % (
            held, total, ", repetition_penalty %g" % args.repetition_penalty
            if args.repetition_penalty else ""))
        if not args.no_plain:
            print("without the schema: %d of %d happen to parse" % (plain, total))
        for f in failures:
            print("  failed: %s %r: %s" % f)
        if args.overhead:
            for concurrency in (1, 8):
                with_schema, without = [], []
                for _ in range(2):  # alternating, so both see the same machine
                    without.append(tpot(client, concurrency, False))
                    with_schema.append(tpot(client, concurrency, True))
                a, b = statistics.mean(with_schema), statistics.mean(without)
                print("decode ms per token at concurrency %d: with the schema %.1f, without "
                      "%.1f (%.2fx)" % (concurrency, a, b, a / b))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
