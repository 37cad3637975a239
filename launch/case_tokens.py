"""Token sources the case generators share (launch/make_needles.py, launch/make_ruler.py): the data's tokenizer as
`ringtrain eval` checks it against the config's data.

  Bytes()            raw UTF-8 bytes (data.source: bytes); identity "bytes", 256 ids
  HfTokenizer(path)  a Hugging Face tokenizer.json (the `tokenizers` package); identity "sha256:<hex of the file>",
                     as launch/prepare_data.py records it in the data's meta.json
  CopyTokens(V)      the copy task (data.source: copy): ids [0, V-1) are content, V-1 the separator; identity "copy"

Each has `identity`, `vocab_size`, `encode(text)` (text sources only) and `token_bytes()`: every id's text as bytes,
which `ringtrain eval --task ruler` joins to read a generated answer (copy ids read as "[id]"). A problem with the
inputs raises CaseError with the message; the scripts print it as their own error and exit 2.
"""
import hashlib
import json


class CaseError(Exception):
    """A user error in a generator's inputs (the message names the problem and the fix)."""


class Bytes:
    identity, vocab_size = "bytes", 256

    def encode(self, text):
        return list(text.encode("utf-8"))

    def token_bytes(self):
        return [bytes([i]) for i in range(256)]


class CopyTokens:
    identity = "copy"

    def __init__(self, vocab_size):
        if vocab_size < 3:
            raise CaseError("--copy-task needs --vocab-size (the config's model.vocab_size, at least 3)")
        self.vocab_size = vocab_size
        self.separator = vocab_size - 1

    def token_bytes(self):
        return [f"[{i}]".encode() for i in range(self.vocab_size)]

    @staticmethod
    def text(ids):
        return "".join(f"[{i}]" for i in ids)


def _gpt2_byte_of_char():
    """The byte-level BPE alphabet: each of the 256 bytes as the printable character the tokenizer stores."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class HfTokenizer:
    def __init__(self, path):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise CaseError("the `tokenizers` package is missing; run launch/install-deps.sh --prepare-data")
        try:
            self.tok = Tokenizer.from_file(path)
        except Exception as e:  # noqa: BLE001 - the library raises plain Exceptions
            raise CaseError(f"cannot read tokenizer '{path}': {e}")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self.identity = "sha256:" + h.hexdigest()
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def token_bytes(self):
        """Byte-level BPE (GPT-2 style): each token's stored characters mapped back to bytes, exactly. Other
        decoders: the text a token adds after an anchor token (so a leading-space marker reads as a space); a token
        that is part of one UTF-8 character reads as U+FFFD there."""
        decoder = (json.loads(self.tok.to_str()).get("decoder") or {}).get("type")
        out = []
        if decoder == "ByteLevel":
            byte_of = _gpt2_byte_of_char()
            for i in range(self.vocab_size):
                piece = self.tok.id_to_token(i) or ""
                if all(c in byte_of for c in piece):
                    out.append(bytes(byte_of[c] for c in piece))
                else:  # an added token stored as plain text
                    out.append(piece.encode("utf-8"))
            return out
        anchor = self.encode("a")[:1]
        base = self.tok.decode(anchor, skip_special_tokens=False) if anchor else ""
        for i in range(self.vocab_size):
            text = self.tok.decode(anchor + [i], skip_special_tokens=False)
            out.append((text[len(base):] if text.startswith(base) else text).encode("utf-8"))
        return out


def open_tokens(args):
    """The source the --tokenizer / --bytes / --copy-task (--vocab-size) options name."""
    if getattr(args, "copy_task", False):
        return CopyTokens(args.vocab_size)
    if getattr(args, "bytes", False):
        return Bytes()
    return HfTokenizer(args.tokenizer)
