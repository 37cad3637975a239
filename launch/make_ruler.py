#!/usr/bin/env python3
"""RULER-style cases for `ringtrain eval --task ruler --cases DIR` (greedy generation, scored by string match).

  launch/make_ruler.py --out DIR --tokenizer tokenizer.json --max-length N [options]
  launch/make_ruler.py --out DIR --bytes --max-length N [options]
  launch/make_ruler.py --out DIR --copy-task --vocab-size V --max-length N [options]

Tasks (--tasks, default all), after RULER's synthetic set (no download needed):
  niah_single      noise haystack (one filler line repeated), one needle "One of the special magic numbers for
                   {key} is: {value}." (key: adjective-noun, value: 7 digits); asked for the key's number
  niah_multikey    needle haystack: every filler line is a needle of another key and number; asked for one key
  niah_multivalue  noise haystack, 4 needles of one key with 4 numbers; all 4 asked
  vt               variable tracking: a chain VAR A = 12345, VAR B = VAR A, ... (4 hops) in a noise haystack, after
                   one worked example; asked for all 5 names holding the value
  fwe              frequent-words extraction: made-up 6-letter words with counts falling as 1/rank^2, the most
                   frequent printed as "..."; asked for the next three
Each case is the prompt (instruction, haystack, question, the answer's opening words) sized so that prompt +
max_new_tokens (RULER's 128 / 30 / 50 tokens, or more when the expected answer needs it; --max-new) is the case's
length. Pieces are tokenized separately and concatenated, so the sizes are exact.

Copy-task cases (data.source: copy, a model that repeats its first half) keep each task's haystack in tokens:
lines of 4 tokens (noise: one random line repeated; a needle: 2 key tokens and 2 value tokens; a chain link: a
2-token name and what it is set to; fwe: 2-token words with Zipf counts). The first span x holds the haystack;
the prompt is x, the separator, and x up to the first answer, so generating means copying on through the answers.

Lengths: --lengths a,b,c, or --num-lengths K halvings up to --max-length (the trained data.seq_len; longer cases
are refused by the eval). --copy-task: --max-length alone by default, since a copy model learns to look back by its
trained span, (seq_len - 1) / 2 + 1 tokens, and a shorter case moves its answers to another offset. --samples
cases per (task, length). A case depends only on --seed, its task, length and sample number (and the tokenizer).

Writes into --out (through <out>.partial, renamed when complete; an existing --out is refused unless --overwrite):
  case_000000.bin ...  each case's prompt tokens, then the expected answer's tokens (int32 little-endian)
  cases.jsonl          one case a line: id, task, length, sample, file, prompt_tokens, gold_tokens (the expected
                       answer: the eval's draft, checked token by token; it never changes the greedy result),
                       max_new_tokens, answers (the strings to find), metric (all: the share of answers found;
                       part: 1 if any is), evidence ([begin, end) token spans of the prompt that hold the answers)
  token_text.json      every token id's text as hex bytes (how the eval reads a generated answer)
  meta.json            format, tokenizer ("sha256:<hex>", "bytes" or "copy"), vocab_size, the options
Errors in the options or inputs print `make_ruler.py: error: ...` and exit with 2.
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys

from case_tokens import CaseError, CopyTokens, open_tokens

TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "vt", "fwe")
MAX_NEW = {"niah_single": 128, "niah_multikey": 128, "niah_multivalue": 128, "vt": 30, "fwe": 50}
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
ADJECTIVES = ("amber brave calm dusty eager fancy gentle hollow icy jolly keen lively misty noble odd polite quiet "
              "rapid silent tidy upbeat vivid witty young zesty bold cheap dark early flat grand huge lazy "
              "mellow narrow plain rough sharp tiny warm wild").split()
NOUNS = ("apple bridge candle desert engine forest garden harbor island jacket kettle ladder meadow needle orchard "
         "pencil quarry river saddle tunnel valley window yacht zebra anchor basket cellar dragon falcon glacier "
         "hammer lantern mirror oyster parrot rocket statue tractor violin walrus").split()


MAX_LENGTH = 2**31 - 1  # data.seq_len is a 32-bit integer
MAX_CASES = 1_000_000   # tasks x lengths x samples
MAX_TOKENS = 2**28      # tokens of all cases together (1 GiB of int32)
MAX_COPY_VOCAB = 2**24  # --copy-task --vocab-size: token_text.json lists every id


def fail(msg):
    print(f"make_ruler.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


class Prompt:
    """Token ids built piece by piece; each piece tokenized on its own (cached), so lengths add up exactly."""

    def __init__(self, tok):
        self.tok, self.ids, self.cache = tok, [], {}

    def enc(self, text):
        if text not in self.cache:
            self.cache[text] = self.tok.encode(text)
        return self.cache[text]

    def add(self, text):
        begin = len(self.ids)
        self.ids += self.enc(text)
        return [begin, len(self.ids)]


class TooShort(Exception):
    pass


def fill_lines(p, room, make_line, lines_needed=0):
    """Filler lines (each make_line() + "\\n") while they fit in `room` tokens; at least lines_needed."""
    lines, used = [], 0
    while True:
        line = make_line() + "\n"
        cost = len(p.enc(line))
        if used + cost > room:
            break
        lines.append(line)
        used += cost
    if len(lines) < lines_needed:
        raise TooShort
    return lines


def insert_in_order(rng, fillers, specials):
    """fillers with the special lines at random places, the specials keeping their order."""
    slots = sorted(rng.randint(0, len(fillers)) for _ in specials)
    out, k = [], 0
    for i in range(len(fillers) + 1):
        while k < len(specials) and slots[k] == i:
            out.append((specials[k], True))
            k += 1
        if i < len(fillers):
            out.append((fillers[i], False))
    return out


def word_key(rng):
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def distinct(rng, n, draw):
    seen = []
    while len(seen) < n:
        v = draw()
        if v not in seen:
            seen.append(v)
    return seen


def max_new_for(task, p, gold, max_new_opt):
    return max_new_opt if max_new_opt else max(MAX_NEW[task], len(p.enc(gold)) + 8)


def text_niah(tok, rng, length, task, max_new_opt):
    many = task == "niah_multivalue"
    key = word_key(rng)
    values = distinct(rng, 4 if many else 1, lambda: str(rng.randint(1000000, 9999999)))
    needles = [f"One of the special magic numbers for {key} is: {v}.\n" for v in values]
    if many:
        head = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the numbers afterwards.\n")
        question = f"What are all the special magic numbers for {key} mentioned in the provided text?"
        prefix = f" The special magic numbers for {key} mentioned in the provided text are"
        gold = " " + ", ".join(values[:-1]) + " and " + values[-1] + "."
    else:
        head = ("A special magic number is hidden within the following text. Make sure to memorize it. "
                "I will quiz you about the number afterwards.\n")
        question = f"What is the special magic number for {key} mentioned in the provided text?"
        prefix = f" The special magic number for {key} mentioned in the provided text is"
        gold = " " + values[0] + "."
    p = Prompt(tok)
    max_new = max_new_for(task, p, gold, max_new_opt)
    fixed = sum(len(p.enc(t)) for t in [head, question, prefix] + needles)
    if task == "niah_multikey":
        def line():
            while True:
                k = word_key(rng)
                if k != key:
                    return f"One of the special magic numbers for {k} is: {rng.randint(1000000, 9999999)}."
    else:
        def line():
            return NOISE
    fillers = fill_lines(p, length - max_new - fixed, line, lines_needed=1)
    p.add(head)
    evidence = []
    for text, special in insert_in_order(rng, fillers, needles):
        span = p.add(text)
        if special:
            evidence.append(span)
    p.add(question)
    p.add(prefix)
    return p, gold, values, evidence, max_new


def vt_block(p, rng, names, value, fillers):
    """One variable-tracking prompt (without the answer): instruction, chain lines among fillers, question."""
    chain = [f"VAR {names[0]} = {value}\n"] + [f"VAR {names[i]} = VAR {names[i - 1]}\n" for i in range(1, len(names))]
    p.add("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n")
    evidence = []
    for text, special in insert_in_order(rng, fillers, chain):
        span = p.add(text)
        if special:
            evidence.append(span)
    p.add(f"Question: Find all variables that are assigned the value {value} in the text above.")
    p.add(f" Answer: According to the chain(s) of variable assignment in the text above, {len(names)} variables "
          f"are assigned the value {value}, they are: ")
    return evidence


def text_vt(tok, rng, length, max_new_opt):
    def name():
        return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
    names = distinct(rng, 5, name)
    value = rng.randint(10000, 99999)
    gold = " ".join(names)
    p = Prompt(tok)
    max_new = max_new_for("vt", p, gold, max_new_opt)
    # The worked example first (its own names and value, the chain alone), as RULER's one in-context example.
    ex_names = distinct(rng, 5, name)
    vt_block(p, rng, ex_names, rng.randint(10000, 99999), [])
    p.add(" ".join(ex_names) + "\n\n")
    probe = Prompt(tok)
    probe.cache = p.cache
    vt_block(probe, random.Random(0), names, value, [])
    fillers = fill_lines(p, length - max_new - len(p.ids) - len(probe.ids), lambda: NOISE, lines_needed=1)
    evidence = vt_block(p, rng, names, value, fillers)
    return p, gold, names, evidence, max_new


def zipf_counts(n_words, vocab):
    """Counts of `vocab` words over about n_words draws, falling as 1/rank^2 (rank 1 first)."""
    norm = sum(1.0 / k ** 2 for k in range(1, vocab + 1))
    return [int(n_words / (k ** 2 * norm)) for k in range(1, vocab + 1)]


def fwe_layout(rng, counts, words, dots):
    """The shuffled word sequence: the top word printed as `dots`."""
    seq = [dots] * counts[0]
    for w, c in zip(words[1:], counts[1:]):
        seq += [w] * c
    rng.shuffle(seq)
    return seq


def fwe_sized(cost_of, room, vocab, words, dots, strict=True):
    """The most draws whose words fit in `room` tokens. strict (text): the answer's ranks 2-4 strictly more frequent
    than rank 5 and rank 1 above them, else TooShort. Not strict (copy task, where only the layout matters): ranks 1-4
    appear at least once."""
    def cost(n):
        counts = zipf_counts(n, vocab)
        if not strict:
            counts[:4] = [max(c, 1) for c in counts[:4]]
        return sum(c * cost_of(w) for c, w in zip(counts, [dots] + words[1:])), counts
    lo, hi = 0, max(room, 1)
    while lo < hi:  # the largest n with cost(n) <= room
        mid = (lo + hi + 1) // 2
        if cost(mid)[0] <= room:
            lo = mid
        else:
            hi = mid - 1
    total, counts = cost(lo)
    if total > room or (strict and not counts[0] > counts[1] > counts[2] > counts[3] > counts[4]):
        raise TooShort
    return counts


def text_fwe(tok, rng, length, max_new_opt):
    vocab = max(length // 50, 8)
    words = distinct(rng, vocab, lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)))
    answers = words[1:4]
    gold = " " + " ".join(answers)
    p = Prompt(tok)
    max_new = max_new_for("fwe", p, gold, max_new_opt)
    head = ("Below is a coded text of made-up words. Count how often each coded word appears and find the three "
            "most frequent ones; the dots '...' are noise, not a word.\n")
    question = "\nQuestion: Which three coded words appear most often in the coded text above?"
    prefix = " Answer: The three most frequent coded words in the coded text above are:"
    fixed = sum(len(p.enc(t)) for t in (head, question, prefix))
    counts = fwe_sized(lambda w: len(p.enc(" " + w)), length - max_new - fixed, vocab, words, "...")
    p.add(head)
    evidence = []
    for w in fwe_layout(rng, counts, words, "..."):
        span = p.add(" " + w)
        if w in answers:
            evidence.append(span)
    p.add(question)
    p.add(prefix)
    return p, gold, answers, evidence, max_new


W = 4  # copy-task line width: a 2-token key or name, then a 2-token value or name


def copy_case(src, rng, length, task):
    """A copy sample's first span x holding the task's haystack; prompt = x, separator, x up to the first answer."""
    V = src.vocab_size
    span = (length - 1) // 2
    content = V - 1  # ids [0, V-1); V-1 is the separator

    def run(n):
        return [rng.randrange(content) for _ in range(n)]

    answers, spans = [], []  # answers: token runs; spans: where they sit in x
    if task == "fwe":
        n_words = min(max(span // 10, 8), content ** 2 - 1)  # 2-token words, all distinct from the dots
        words = distinct(rng, n_words, lambda: tuple(run(2)))
        dots = tuple(run(2))
        while dots in words:
            dots = tuple(run(2))
        counts = fwe_sized(lambda w: 2, span, n_words, list(words), dots, strict=False)
        seq = fwe_layout(rng, counts, list(words), dots)
        x = [t for w in seq for t in w]
        x += run(span - len(x))
        for w in words[1:4]:
            at = 2 * seq.index(w)
            answers.append(list(w))
            spans.append([at, at + 2])
    else:
        lines = span // W
        need = {"niah_single": 1, "niah_multikey": 2, "niah_multivalue": 4, "vt": 5}[task]
        if lines < need:
            raise TooShort
        noise = run(W)
        if task == "niah_multikey":  # the queried key first; every other line a needle of another key
            key = run(2)
            body = []
            for _ in range(lines):
                other = run(2)
                while other == key:
                    other = run(2)
                body.append(other + run(W - 2))
        else:
            body = [list(noise) for _ in range(lines)]
        at = sorted(rng.sample(range(lines), 1 if task == "niah_multikey" else need))
        if task == "niah_multikey":
            body[at[0]][:2] = key
            answers, spans = [body[at[0]][2:]], [[W * at[0] + 2, W * at[0] + W]]
        elif task in ("niah_single", "niah_multivalue"):
            key = run(2)
            values = distinct(rng, need, lambda: tuple(run(W - 2)))
            for i, v in zip(at, values):
                body[i] = key + list(v)
                answers.append(list(v))
                spans.append([W * i + 2, W * i + W])
        else:  # vt: a name, then the value or the previous name
            names = distinct(rng, 5, lambda: tuple(run(2)))
            value = run(W - 2)
            for j, i in enumerate(at):
                body[i] = list(names[j]) + (value if j == 0 else list(names[j - 1]))
                answers.append(list(names[j]))
                spans.append([W * i, W * i + 2])
        x = [t for b in body for t in b]
        x += noise[:span - len(x)]
    q = min(b for b, _ in spans)
    end = max(e for _, e in spans)
    prompt = x + [src.separator] + x[:q]
    gold = x[q:end]
    evidence = [list(s) for s in spans]
    return prompt, gold, [CopyTokens.text(a) for a in answers], evidence, end - q


def parse_list(text, kind, name):
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} '{text}' is not a comma-separated list of numbers")


def make_case(src, copy, task, length, sample, seed, max_new_opt):
    rng = random.Random(f"{seed}:{task}:{length}:{sample}")
    if copy:
        prompt, gold, answers, evidence, max_new = copy_case(src, rng, length, task)
        if max_new_opt:
            max_new = max_new_opt
        if len(prompt) + max_new > length:
            raise TooShort
        return prompt, gold, answers, evidence, max_new
    if task == "vt":
        p, gold, answers, evidence, max_new = text_vt(src, rng, length, max_new_opt)
    elif task == "fwe":
        p, gold, answers, evidence, max_new = text_fwe(src, rng, length, max_new_opt)
    else:
        p, gold, answers, evidence, max_new = text_niah(src, rng, length, task, max_new_opt)
    if len(p.ids) + max_new > length:
        raise TooShort
    return p.ids, src.encode(gold), answers, evidence, max_new


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    src_group = ap.add_mutually_exclusive_group(required=True)
    src_group.add_argument("--tokenizer", help="the data's tokenizer.json")
    src_group.add_argument("--bytes", action="store_true", help="UTF-8 bytes (data.source: bytes)")
    src_group.add_argument("--copy-task", action="store_true", help="copy-task samples (data.source: copy)")
    ap.add_argument("--vocab-size", type=int, default=0, help="--copy-task: model.vocab_size")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    ap.add_argument("--max-length", type=int, required=True, help="the trained data.seq_len")
    ap.add_argument("--lengths", help="comma-separated case lengths (default: --num-lengths up to --max-length)")
    ap.add_argument("--num-lengths", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4, help="cases per (task, length)")
    ap.add_argument("--max-new", type=int, default=0, help="tokens to generate per case (default: per task)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if not 2 <= args.max_length <= MAX_LENGTH:
        fail(f"--max-length {args.max_length} is outside [2, {MAX_LENGTH}] (the trained data.seq_len)")
    if args.lengths:
        lengths = parse_list(args.lengths, int, "--lengths")
    elif args.copy_task:
        lengths = [args.max_length]  # a copy model learns the offset of its trained span: other lengths move it
    else:
        if args.num_lengths < 1:
            fail(f"--num-lengths {args.num_lengths} must be >= 1")
        lengths = sorted({args.max_length >> k for k in range(args.num_lengths)} - {0})
    bad = [n for n in lengths if n > args.max_length or n < 2]
    if not lengths or bad:
        fail(f"--lengths {bad or lengths} must be in [2, --max-length {args.max_length}] (the trained data.seq_len)")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if not tasks or unknown:
        fail(f"--tasks: {unknown or 'none given'}; choose from {', '.join(TASKS)}")
    if args.samples < 1:
        fail(f"--samples {args.samples} must be >= 1")
    if args.max_new < 0:
        fail(f"--max-new {args.max_new} must be >= 1 (or 0: each task's default)")
    if len(tasks) * len(lengths) * args.samples > MAX_CASES:
        fail(f"{len(tasks)} tasks x {len(lengths)} lengths x --samples {args.samples} is more than {MAX_CASES} cases; "
             "give fewer")
    if len(tasks) * sum(lengths) * args.samples > MAX_TOKENS:
        fail(f"the cases would hold up to {len(tasks) * sum(lengths) * args.samples} tokens, more than {MAX_TOKENS}; "
             "give shorter --lengths, fewer --tasks or --samples")
    if args.vocab_size and not args.copy_task:
        fail("--vocab-size is for --copy-task; a tokenizer or --bytes sets the vocabulary")
    if args.copy_task and not 5 <= args.vocab_size <= MAX_COPY_VOCAB:
        fail(f"--copy-task needs --vocab-size in [5, {MAX_COPY_VOCAB}] (the config's model.vocab_size; the tasks' "
             f"2-token keys, names and words need at least 4 content ids), not {args.vocab_size}")
    try:
        src = open_tokens(args)
    except (CaseError, OSError) as e:
        fail(str(e))

    out = args.out.rstrip("/") or args.out
    if os.path.lexists(out):
        if not args.overwrite:
            fail(f"--out '{out}' exists; choose a new directory or pass --overwrite to replace it")
        if not os.path.isdir(out) or os.path.islink(out):
            fail(f"--out '{out}' is not a directory; --overwrite replaces only a case directory")
        if os.listdir(out) and not os.path.exists(os.path.join(out, "cases.jsonl")):
            fail(f"--out '{out}' is a directory without cases.jsonl; --overwrite replaces only a case directory")
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        os.makedirs(partial)
    except OSError as e:
        fail(f"cannot create '{partial}': {e}")
    try:
        k = write_cases(partial, src, tasks, lengths, args)
        if os.path.lexists(out):
            shutil.rmtree(out)
        os.rename(partial, out)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        fail(f"cannot write the cases to '{out}': {e}; nothing was written there")
    except KeyboardInterrupt:
        shutil.rmtree(partial, ignore_errors=True)
        print("make_ruler.py: interrupted; nothing was written", file=sys.stderr)
        sys.exit(130)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(f"make_ruler.py: wrote {k} cases ({len(tasks)} tasks x {len(lengths)} lengths x {args.samples}) to {out} "
          f"(tokenizer {src.identity}, vocab {src.vocab_size})")


def write_cases(partial, src, tasks, lengths, args):
    """Every case into `partial` (token files, cases.jsonl, token_text.json, meta.json); returns their count."""
    lines, k = [], 0
    for task in tasks:
        for length in lengths:
            for sample in range(args.samples):
                try:
                    prompt, gold, answers, evidence, max_new = make_case(
                        src, args.copy_task, task, length, sample, args.seed, args.max_new)
                except TooShort:
                    fail(f"length {length} is too short for task {task} (its instruction, question, needed "
                         f"lines and tokens to generate); use longer --lengths or leave {task} out of --tasks")
                name = f"case_{k:06d}.bin"
                ids = prompt + gold
                with open(os.path.join(partial, name), "wb") as f:
                    f.write(struct.pack(f"<{len(ids)}i", *ids))
                lines.append(json.dumps({
                    "id": k, "task": task, "length": length, "sample": sample, "file": name,
                    "prompt_tokens": len(prompt), "gold_tokens": len(gold), "max_new_tokens": max_new,
                    "answers": answers, "metric": "all", "evidence": evidence}))
                k += 1
    with open(os.path.join(partial, "cases.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(partial, "token_text.json"), "w") as f:
        json.dump({"encoding": "hex", "tokens": [b.hex() for b in src.token_bytes()]}, f)
    meta = {"format": "ringtrain-ruler", "version": 1, "tokenizer": src.identity, "vocab_size": src.vocab_size,
            "token_dtype": "int32-le", "cases": k, "tasks": tasks, "lengths": lengths, "samples": args.samples,
            "seed": args.seed, "max_new": args.max_new or "per task"}
    with open(os.path.join(partial, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    return k


if __name__ == "__main__":
    main()
