# Stub for OlgaChernytska/word2vec-pytorch train.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * torchtext (a third-party package the repository pins at 0.10.0; no torchtext release works with the
#     torch of this venv, and its WikiText2 download needs the network): a small in-memory package `torchtext`
#     with exactly the five names utils/dataloader.py imports:
#       - torchtext.datasets.WikiText2 / WikiText103(root, split): an iterator over the lines of a seeded synthetic
#         "wiki" text (WikiText-style: a " = title = " heading, blank " " lines and lines of 10..24 words from a
#         36-word lowercase vocabulary with Zipf-like frequencies). train: 288 lines, valid: 64 lines (test: 64).
#         Nothing is read from or written to `root`.
#       - torchtext.data.to_map_style_dataset(iter): a torch Dataset over the materialized lines (as torchtext's).
#       - torchtext.data.utils.get_tokenizer("basic_english", language="en"): lower-case, punctuation split off,
#         whitespace split (the synthetic text is plain lowercase words, so this matches torchtext's rules).
#       - torchtext.vocab.build_vocab_from_iterator(iter, specials, min_freq): a Vocab with specials first, then
#         tokens with count >= min_freq sorted by (-count, token), as torchtext orders them; Vocab supports
#         get_stoi(), vocab[token], vocab(list_of_tokens), set_default_index, len(); it is picklable (the script
#         torch.saves it), its class living in the registered module `torchtext.vocab`.
#   * a torch API removal (compatibility shim only): utils/helper.py calls LambdaLR(..., verbose=True); the
#     `verbose` argument was deprecated in torch 2.2 and later removed. torch.optim.lr_scheduler.LambdaLR becomes a
#     subclass of the real class that accepts and ignores `verbose` (the old per-step "Adjusting learning rate"
#     message is not emulated). Nothing else about the scheduler changes.
import random
import re
import sys
import types
from collections import Counter

TRAIN_LINES, VALID_LINES, TEST_LINES = 288, 64, 64
WORDS = ("the of and in to a was is for on as with by he at from his an were are which this be also had first "
         "city river war film game album song team season").split()


def _wiki_lines(split):
    rng = random.Random({"train": 101, "valid": 202, "test": 303}[split])
    n = {"train": TRAIN_LINES, "valid": VALID_LINES, "test": TEST_LINES}[split]
    weights = [1.0 / (i + 1) ** 0.6 for i in range(len(WORDS))]
    lines = []
    for i in range(n):
        if i % 12 == 0:
            lines.append(" = %s %s = \n" % (rng.choice(WORDS[-8:]), rng.choice(WORDS[-8:])))
        elif i % 12 == 1:
            lines.append(" \n")
        else:
            k = rng.randint(10, 24)
            lines.append(" " + " ".join(rng.choices(WORDS, weights=weights, k=k)) + " . \n")
    return lines


def _wiki(name):
    def dataset(root=".data", split=("train", "valid", "test")):
        if isinstance(split, (tuple, list)):
            return tuple(iter(_wiki_lines(s)) for s in split)
        return iter(_wiki_lines(split))

    dataset.__name__ = name
    return dataset


def to_map_style_dataset(iter_data):
    from torch.utils.data import Dataset

    class _MapStyleDataset(Dataset):
        def __init__(self, it):
            self._data = list(it)

        def __len__(self):
            return len(self._data)

        def __getitem__(self, idx):
            return self._data[idx]

    return _MapStyleDataset(iter_data)


_PUNCT = [(re.compile(p), r) for p, r in [(r"\'", " '  "), (r"\"", ""), (r"\.", " . "), (r"<br \/>", " "),
                                          (r",", " , "), (r"\(", " ( "), (r"\)", " ) "), (r"\!", " ! "),
                                          (r"\?", " ? "), (r"\;", " "), (r"\:", " "), (r"\s+", " ")]]


def _basic_english(line):
    line = line.lower()
    for pat, rep in _PUNCT:
        line = pat.sub(rep, line)
    return line.split()


def get_tokenizer(tokenizer, language="en"):
    if tokenizer != "basic_english":
        raise ValueError("stub torchtext: only basic_english is provided")
    return _basic_english


class Vocab(object):
    def __init__(self, itos):
        self._itos = list(itos)
        self._stoi = {t: i for i, t in enumerate(self._itos)}
        self._default = None

    def __len__(self):
        return len(self._itos)

    def __contains__(self, token):
        return token in self._stoi

    def __getitem__(self, token):
        if token in self._stoi:
            return self._stoi[token]
        if self._default is None:
            raise RuntimeError("Token %s not found and default index is not set" % token)
        return self._default

    def __call__(self, tokens):
        return [self[t] for t in tokens]

    def set_default_index(self, index):
        self._default = index

    def get_default_index(self):
        return self._default

    def get_stoi(self):
        return dict(self._stoi)

    def get_itos(self):
        return list(self._itos)

    def lookup_tokens(self, indices):
        return [self._itos[i] for i in indices]


def build_vocab_from_iterator(iterator, min_freq=1, specials=None, special_first=True, max_tokens=None):
    counter = Counter()
    for tokens in iterator:
        counter.update(tokens)
    specials = list(specials or [])
    for s in specials:
        counter.pop(s, None)
    ordered = sorted(counter.items(), key=lambda x: (-x[1], x[0]))
    words = [t for t, c in ordered if c >= min_freq]
    itos = specials + words if special_first else words + specials
    return Vocab(itos)


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    for v in attrs.values():
        if isinstance(v, type) or callable(v):
            try:
                v.__module__ = name
            except (AttributeError, TypeError):
                pass
    sys.modules[name] = m
    return m


_tt = _module("torchtext")
_tt.__path__ = []
_tt.data = _module("torchtext.data", to_map_style_dataset=to_map_style_dataset)
_tt.data.__path__ = []
_tt.data.utils = _module("torchtext.data.utils", get_tokenizer=get_tokenizer)
_tt.vocab = _module("torchtext.vocab", Vocab=Vocab, build_vocab_from_iterator=build_vocab_from_iterator)
_tt.datasets = _module("torchtext.datasets", WikiText2=_wiki("WikiText2"), WikiText103=_wiki("WikiText103"))


def _patch_torch(torch):
    sched = torch.optim.lr_scheduler
    real = sched.LambdaLR

    class LambdaLR(real):
        def __init__(self, optimizer, lr_lambda, last_epoch=-1, verbose="deprecated"):
            real.__init__(self, optimizer, lr_lambda, last_epoch=last_epoch)

    LambdaLR.__module__ = real.__module__
    LambdaLR.__qualname__ = real.__qualname__
    sched.LambdaLR = LambdaLR


when_imported("torch", _patch_torch)  # noqa: F821 (provided by the probe)
