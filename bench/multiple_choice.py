"""A multiple-choice accuracy scored both ways: tpc serve's echo (lm-eval's loglikelihood
requests) and transformers (issue 44).

    ~/.cache/tpc-venv/bin/python bench/multiple_choice.py CKPT [--tpc PATH] [-- tpc serve flags...]

Forty general-knowledge questions of four choices each, written here (no dataset is
downloaded). Each choice is scored as lm-eval scores a loglikelihood task: the context
"Question: Q\\nAnswer:" and the continuation " CHOICE", tokenized as lm-eval's _encode_pair
does (the whole text, split where the context's tokens end), the continuation's summed
log-probability. tpc serve is asked in lm-eval's own shape (local-completions: the prompt as a
list of token ids, echo, logprobs 1, max_tokens 1, temperature 0) and the sum read from the
echoed prompt's token_logprobs, as lm-eval's parse_logprobs reads it; transformers' fp32
model gives its log_softmax of the same ids. Reported: each way's accuracy (the choice of the
highest sum, lm-eval's acc) and length-normalized accuracy (acc_norm: per character), how
many questions both pick the same choice for, and the largest difference of a sum.
"""
import argparse
import json
import os
import sys
import time

from prefix_cache import Server, serve_arguments  # tpc serve on a free port, until stop()

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTIONS = [
    ("What is the capital of France?", ["Paris", "Berlin", "Madrid", "Rome"], 0),
    ("How many legs does a spider have?", ["Six", "Eight", "Ten", "Four"], 1),
    ("Which planet is known as the Red Planet?", ["Venus", "Jupiter", "Mars", "Saturn"], 2),
    ("What do bees make?", ["Silk", "Milk", "Wax paper", "Honey"], 3),
    ("What is frozen water called?", ["Ice", "Steam", "Sand", "Glass"], 0),
    ("Which animal is the largest mammal?", ["Elephant", "Blue whale", "Giraffe", "Horse"], 1),
    ("What color is the sky on a clear day?", ["Green", "Red", "Blue", "Black"], 2),
    ("How many days are in a week?", ["Five", "Six", "Ten", "Seven"], 3),
    ("What gas do plants take in from the air?", ["Carbon dioxide", "Helium", "Neon", "Argon"], 0),
    ("Which is the largest ocean on Earth?", ["Atlantic", "Pacific", "Indian", "Arctic"], 1),
    ("What is two plus three?", ["Four", "Six", "Five", "Nine"], 2),
    ("Which season comes after winter?", ["Autumn", "Summer", "Winter", "Spring"], 3),
    ("What do cows drink?", ["Water", "Oil", "Ink", "Paint"], 0),
    ("Who wrote Romeo and Juliet?", ["Charles Dickens", "William Shakespeare", "Mark Twain",
                                     "Jane Austen"], 1),
    ("What is the boiling point of water in Celsius?", ["50 degrees", "0 degrees",
                                                        "100 degrees", "200 degrees"], 2),
    ("Which organ pumps blood through the body?", ["Lung", "Liver", "Stomach", "Heart"], 3),
    ("What is the opposite of hot?", ["Cold", "Warm", "Loud", "Tall"], 0),
    ("Which bird is a symbol of peace?", ["Crow", "Dove", "Eagle", "Vulture"], 1),
    ("What shape has three sides?", ["Square", "Circle", "Triangle", "Hexagon"], 2),
    ("What do you use to write on a blackboard?", ["Spoon", "Brush", "Pen", "Chalk"], 3),
    ("Which metal is liquid at room temperature?", ["Mercury", "Iron", "Copper", "Gold"], 0),
    ("What is the capital of Japan?", ["Beijing", "Tokyo", "Seoul", "Bangkok"], 1),
    ("How many continents are there?", ["Five", "Nine", "Seven", "Three"], 2),
    ("What do caterpillars turn into?", ["Spiders", "Worms", "Beetles", "Butterflies"], 3),
    ("Which language is spoken in Brazil?", ["Portuguese", "Spanish", "French", "German"], 0),
    ("What is the main ingredient of bread?", ["Rice", "Flour", "Sugar", "Salt"], 1),
    ("Which star is closest to the Earth?", ["Sirius", "Polaris", "The Sun", "Vega"], 2),
    ("What instrument has black and white keys?", ["Violin", "Drum", "Flute", "Piano"], 3),
    ("What is the chemical symbol for gold?", ["Au", "Ag", "Fe", "Pb"], 0),
    ("How many hours are in a day?", ["Twelve", "Twenty-four", "Sixty", "Ten"], 1),
    ("Which animal is known for its long neck?", ["Lion", "Zebra", "Giraffe", "Bear"], 2),
    ("What falls from clouds when it rains?", ["Sand", "Leaves", "Snowmen", "Water"], 3),
    ("What is the capital of Italy?", ["Rome", "Milan", "Venice", "Naples"], 0),
    ("Which fruit is yellow and curved?", ["Apple", "Banana", "Cherry", "Grape"], 1),
    ("What do we call a baby dog?", ["Kitten", "Calf", "Puppy", "Foal"], 2),
    ("Which direction does the sun rise from?", ["West", "North", "South", "East"], 3),
    ("What is the largest planet in the solar system?", ["Jupiter", "Mars", "Earth",
                                                          "Mercury"], 0),
    ("How many sides does a hexagon have?", ["Five", "Six", "Seven", "Eight"], 1),
    ("What is the freezing point of water in Celsius?", ["100 degrees", "50 degrees",
                                                         "0 degrees", "-50 degrees"], 2),
    ("Which tool is used to cut paper?", ["Hammer", "Spoon", "Ladder", "Scissors"], 3),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    args, flags = serve_arguments(parser)  # tpc serve's flags after "--"

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(args.ckpt)
    model = AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=torch.float32,
                                                 attn_implementation="eager")

    def pair(question, choice):  # lm-eval's _encode_pair
        context, continuation = "Question: %s\nAnswer:" % question, " " + choice
        whole = tokenizer(context + continuation)["input_ids"]
        n = len(tokenizer(context)["input_ids"])
        return whole, n

    def transformers_sum(ids, n):
        with torch.no_grad():
            rows = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)
        return sum(rows[p - 1, ids[p]].item() for p in range(n, len(ids)))

    server = Server(args.tpc, args.ckpt, flags)
    try:
        rows, started = [], time.perf_counter()
        tpc_seconds = 0.0
        for question, choices, gold in QUESTIONS:
            sums = []
            for choice in choices:
                ids, n = pair(question, choice)
                t = time.perf_counter()
                status, text = server.request("POST", "/v1/completions", {
                    "model": "ckpt", "prompt": [ids], "echo": True, "logprobs": 1,
                    "max_tokens": 1, "temperature": 0, "seed": 1234})
                tpc_seconds += time.perf_counter() - t
                if status != 200:
                    raise SystemExit("tpc serve: %s %s" % (status, text[:300]))
                logprobs = json.loads(text)["choices"][0]["logprobs"]["token_logprobs"]
                sums.append((sum(logprobs[n:-1]), transformers_sum(ids, n), len(choice) + 1))
            rows.append((sums, gold))
    finally:
        server.stop()

    def accuracy(way, norm):
        right = 0
        for sums, gold in rows:
            scores = [s[way] / (s[2] if norm else 1) for s in sums]
            right += scores.index(max(scores)) == gold
        return right / len(rows)

    same = sum(max(range(4), key=lambda i: s[i][0]) == max(range(4), key=lambda i: s[i][1])
               for s, _ in rows)
    worst = max(abs(a - b) for sums, _ in rows for a, b, _ in sums)
    print("%d questions, 4 choices each, SmolLM2 (%s), tpc serve %s" % (
        len(rows), args.ckpt, " ".join(flags) or "(default flags)"))
    print("accuracy:      tpc %.3f, transformers %.3f" % (accuracy(0, False), accuracy(1, False)))
    print("accuracy norm: tpc %.3f, transformers %.3f" % (accuracy(0, True), accuracy(1, True)))
    print("same choice picked: %d of %d questions" % (same, len(rows)))
    print("largest difference of a continuation's sum: %.2e" % worst)
    print("tpc serve's %d scoring requests: %.2f s" % (4 * len(rows), tpc_seconds))


if __name__ == "__main__":
    main()
