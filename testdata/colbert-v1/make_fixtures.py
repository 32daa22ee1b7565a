"""Tiny ColBERT checkpoints and PyLate's own vectors for them: the fixtures of cellar-encode's
fidelity test (`crates/cellar-encode/tests/colbert.rs`).

Run once, by hand, where `pip install pylate==1.6.0` and `pip install colbert-ai` work
(nothing here runs in the tests). The two libraries want different transformers versions, so
each part runs on its own (in environments of its own):

    python3 testdata/colbert-v1/make_fixtures.py pylate      # bert/ and bert-corpus/
    python3 testdata/colbert-v1/make_fixtures.py colbert-ai  # stanford/ (transformers 4.48)

It writes, for each architecture in ARCHITECTURES, `testdata/colbert-v1/<name>/`: a randomly
initialised model saved by PyLate (its Transformer module at the top: config.json,
model.safetensors, tokenizer files; `1_Dense/`; `modules.json`; `config_sentence_transformers.json`
with the prefixes, lengths, expansion and skiplist settings) and `expected.json`: the texts and,
per text, the token vectors `ColBERT.encode` returns (queries with `is_query=True`). The texts
include ones longer than the query and document limits and ones full of punctuation.

It also writes `testdata/colbert-v1/bert-corpus/`, the end-to-end recipe of docs/embeddings.md
run by PyLate: a small corpus encoded by the BERT checkpoint in the folder layout of
`cellar index --vectors` (`embeddings.0.npy`, `doclens.0.json`, `corpus.jsonl`), and
`queries.json`: each query's PyLate vectors and PyLate's own exact MaxSim ranking of the whole
corpus (`pylate.rank.rerank`), which an index built from the folder must reproduce
(`python/tests/test_embeddings.py`).
"""

from __future__ import annotations

import json
import shutil
import string
import sys
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.decoders import WordPiece as WordPieceDecoder
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import BertProcessing
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
WORDS = """the a an of and or to in on is are was were be by for with what how why which who
volcano lava magma crust eruption coffee tea milk bean roast brew espresso violin bow string music
glacier ice valley climate bread yeast dough oven bake football goal team final penalty vitamin
bone fracture study cell protein gene dose risk patient trial effect""".split()
QUERIES = [
    "what is a volcano?",
    "coffee, tea; and milk!!!",
    "how does magma rise through the crust to make an eruption of lava on the volcano slope today",
    "a",
    "(vitamin) [bone] {fracture} -- risk?!",
]
DOCUMENTS = [
    "A volcano erupts when magma rises through the crust and lava flows down.",
    "Coffee beans are roasted, ground, and brewed: espresso... or filter!",
    " ".join(WORDS[:60]),
    "!!! ??? ... ,,, ;;;",
    "ice",
]
#: Query settings encoded again on the PyLate checkpoint (`expected-<name>.json`).
VARIANTS = {
    "attend": {"attend_to_expansion_tokens": True},
    "no-expansion": {"do_query_expansion": False},
}
QUERY_LENGTH = 12
DOCUMENT_LENGTH = 24
EMBEDDING_SIZE = 16


def vocabulary() -> list[str]:
    # [unused0] and [unused1] are colbert-ai's query and document markers.
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
    chars = list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation)
    pieces = ["##" + c for c in string.ascii_lowercase + string.digits]
    return specials + chars + pieces + [w for w in WORDS if w not in chars]


def wordpiece_tokenizer() -> PreTrainedTokenizerFast:
    """A BERT-style (lower-casing WordPiece) tokenizer over `vocabulary()`, built with the
    tokenizers library directly (nothing downloaded)."""
    vocab = {token: i for i, token in enumerate(vocabulary())}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = BertNormalizer(lowercase=True)
    tok.pre_tokenizer = BertPreTokenizer()
    tok.post_processor = BertProcessing(("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"]))
    tok.decoder = WordPieceDecoder(prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )


def bert(directory: Path) -> None:
    tokenizer = wordpiece_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def modernbert(directory: Path) -> None:
    from transformers import ModernBertConfig, ModernBertModel

    tokenizer = wordpiece_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    config = ModernBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        max_position_embeddings=64,
        # A window of 8 (4 each side) on the sliding layers, so 24-token documents feel it.
        local_attention=8,
        global_attn_every_n_layers=3,
        # Weights large enough that attention is far from uniform: with the default 0.02, rotary
        # positions change the vectors by less than the tests' 1e-4.
        initializer_range=0.5,
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
    )
    ModernBertModel(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


ARCHITECTURES = {"bert": bert, "modernbert": modernbert}


def stanford(out: Path) -> dict:
    """The Stanford colbert-ai layout (`artifact.metadata`, `linear` inside model.safetensors),
    saved and encoded by colbert-ai itself (`pip install colbert-ai`; its import needs
    gitpython and ujson): `Checkpoint.queryFromText` and `docFromText(keep_dims=False)`."""
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        bert(base)
        config = ColBERTConfig(
            checkpoint=str(base), query_maxlen=QUERY_LENGTH, doc_maxlen=DOCUMENT_LENGTH, dim=EMBEDDING_SIZE
        )
        Checkpoint(str(base), colbert_config=config, verbose=0).save(str(out))
    reloaded = Checkpoint(str(out), colbert_config=ColBERTConfig(checkpoint=str(out)), verbose=0)
    queries = reloaded.queryFromText(QUERIES)
    documents = reloaded.docFromText(DOCUMENTS, keep_dims=False)
    if isinstance(documents, tuple):
        documents = documents[0]
    return {
        "made_by": f"colbert-ai (Checkpoint), torch {torch.__version__}, python {sys.version.split()[0]}",
        "query_length": QUERY_LENGTH,
        "document_length": DOCUMENT_LENGTH,
        "queries": [{"text": t, "vectors": v.tolist()} for t, v in zip(QUERIES, queries)],
        "documents": [{"text": t, "vectors": v.tolist()} for t, v in zip(DOCUMENTS, documents)],
    }

CORPUS = [
    ("volcano", "A volcano erupts when magma rises through the crust and lava flows down its slope."),
    ("coffee", "Coffee beans are roasted, ground and brewed to make espresso or filter coffee."),
    ("violin", "The violin is a string instrument played with a bow in music."),
    ("glacier", "A glacier is a slow river of ice that carves a valley as the climate warms."),
    ("bread", "Bakers knead dough with yeast and bake bread in a hot oven."),
    ("football", "The football team scored a late goal and won the final on a penalty."),
    ("vitamin", "A study of vitamin dose and bone fracture risk in patient trials."),
    ("protein", "A gene makes a protein in the cell, with an effect on risk."),
]
CORPUS_QUERIES = ["lava and magma", "espresso beans", "bow and string music", "bone fracture risk"]


def end_to_end(model, out: Path) -> None:
    """The recipe: PyLate encodes, the vectors go to disk in Cellar's folder layout."""
    import numpy as np
    from pylate import rank

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ids = [f"{topic}-{n}" for topic, _ in CORPUS for n in range(3)]
    texts = [f"{text} Note {n}." for _, text in CORPUS for n in range(3)]
    docs = model.encode(texts, is_query=False, convert_to_numpy=True)
    np.save(out / "embeddings.0.npy", np.concatenate(docs).astype(np.float32))
    (out / "doclens.0.json").write_text(json.dumps([len(d) for d in docs]))
    lines = [json.dumps({"_id": i, "text": t}) for i, t in zip(ids, texts)]
    (out / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    queries = model.encode(CORPUS_QUERIES, is_query=True, convert_to_numpy=True)
    ranked = rank.rerank(
        documents_ids=[ids] * len(queries),
        queries_embeddings=list(queries),
        documents_embeddings=[list(docs)] * len(queries),
    )
    cases = [
        {"text": t, "vectors": q.tolist(), "ranking": [{"id": r["id"], "score": float(r["score"])} for r in ranking]}
        for t, q, ranking in zip(CORPUS_QUERIES, queries, ranked)
    ]
    (out / "queries.json").write_text(json.dumps(cases) + "\n")


def pylate_fixtures() -> None:
    import pylate
    from pylate import models

    for name, make in ARCHITECTURES.items():
        out = HERE / name
        shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) / "base"
            make(base)
            model = models.ColBERT(
                model_name_or_path=str(base),
                embedding_size=EMBEDDING_SIZE,
                query_length=QUERY_LENGTH,
                document_length=DOCUMENT_LENGTH,
                device="cpu",
            )
            model.save(str(out))
        reloaded = models.ColBERT(model_name_or_path=str(out), device="cpu")
        queries = reloaded.encode(QUERIES, is_query=True, convert_to_numpy=True)
        documents = reloaded.encode(DOCUMENTS, is_query=False, convert_to_numpy=True)
        expected = {
            "made_by": f"pylate {pylate.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}",
            "query_length": QUERY_LENGTH,
            "document_length": DOCUMENT_LENGTH,
            "queries": [{"text": t, "vectors": v.tolist()} for t, v in zip(QUERIES, queries)],
            "documents": [{"text": t, "vectors": v.tolist()} for t, v in zip(DOCUMENTS, documents)],
        }
        (out / "expected.json").write_text(json.dumps(expected, indent=None) + "\n")
        # The same checkpoint with other query settings (the test patches its copy's config):
        # every query token attending to the [MASK] expansion, and no expansion at all.
        for variant, settings in VARIANTS.items():
            other = models.ColBERT(model_name_or_path=str(out), device="cpu", **settings)
            vectors = other.encode(QUERIES, is_query=True, convert_to_numpy=True)
            cases = [{"text": t, "vectors": v.tolist()} for t, v in zip(QUERIES, vectors)]
            body = {"settings": settings, "queries": cases}
            (out / f"expected-{variant}.json").write_text(json.dumps(body) + "\n")
        for unused in ("README.md",):
            (out / unused).unlink(missing_ok=True)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"{name}: {out} ({size / 1024:.0f} KiB)")
        if name == "bert":
            end_to_end(reloaded, HERE / "bert-corpus")


def colbert_ai_fixture() -> None:
    out = HERE / "stanford"
    shutil.rmtree(out, ignore_errors=True)
    expected = stanford(out)
    (out / "expected.json").write_text(json.dumps(expected) + "\n")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"stanford: {out} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    torch.manual_seed(20261123)
    parts = {"pylate": pylate_fixtures, "colbert-ai": colbert_ai_fixture}
    if len(sys.argv) != 2 or sys.argv[1] not in parts:
        sys.exit(f"usage: make_fixtures.py {'|'.join(parts)}")
    parts[sys.argv[1]]()
