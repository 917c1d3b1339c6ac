# Stub for timbmg/Sentence-VAE train.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * the Penn Treebank text files (upstream: dowloaddata.sh fetches simple-examples.tgz and moves
#     ptb.{train,valid,test}.txt into data/): the stub writes a seeded synthetic PTB-style corpus there
#     (lowercase words from a 60-word vocabulary plus PTB's "n" / "<unk>" / "'s" / "n't" tokens, 8..30 words a
#     line, " " prefix and "\n" ending as in PTB): train 96 lines, valid 32, test 32. Each file is written to a
#     per-pid temporary name and os.replace'd (every process runs the stub), and only when the content differs.
#     The repository's own ptb.py turns them into ptb.*.json / ptb.vocab.json on first use (nltk TweetTokenizer,
#     the real package, installed into the venv); the stub does not write those (see NOTES.md on the ranks
#     creating them concurrently).
#   * the wall clock for the run's timestamp: time.gmtime() called with no argument returns a fixed UTC time
#     (2024-01-01 00:00:00), so `ts = time.strftime(..., time.gmtime())` names the same bin/<ts>/ folder in the
#     original and the migrated run and on both ranks (checkpoints are compared by path). time.gmtime(secs) and
#     every other clock are untouched.
import os
import random
import time

LINES = {"train": 96, "valid": 32, "test": 32}
WORDS = ("the company said it will be in of a to and for that is on at by with from as market shares stock "
         "year million new sales price trading mr. inc. corp. billion investors president bank federal rate "
         "quarter last first group business government week months chairman profit oil plan analysts cents "
         "earlier traders expected u.s. japan interest debt bonds").split()
EXTRA = ["n", "<unk>", "'s", "n't", "$"]
DATA_DIR = "data"


def _corpus(split):
    rng = random.Random({"train": 11, "valid": 22, "test": 33}[split])
    vocab = WORDS + EXTRA
    weights = [1.0 / (i + 1) ** 0.5 for i in range(len(WORDS))] + [0.6] * len(EXTRA)
    out = []
    for _ in range(LINES[split]):
        k = rng.randint(8, 30)
        out.append(" " + " ".join(rng.choices(vocab, weights=weights, k=k)) + " \n")
    return "".join(out)


def _write_corpus():
    os.makedirs(DATA_DIR, exist_ok=True)
    for split in LINES:
        path = os.path.join(DATA_DIR, "ptb.%s.txt" % split)
        text = _corpus(split)
        try:
            with open(path) as fh:
                if fh.read() == text:
                    continue
        except OSError:
            pass
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)


_FIXED = time.struct_time((2024, 1, 1, 0, 0, 0, 0, 1, 0))
_real_gmtime = time.gmtime


def _gmtime(*args):
    if not args or args[0] is None:
        return _FIXED
    return _real_gmtime(*args)


time.gmtime = _gmtime
_write_corpus()
