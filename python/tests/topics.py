"""The test collection: 9 topics of 4 documents each, in BEIR layout.

Every judged query asks about one topic, with graded judgments (2: on point, 1: related, 0: judged
not relevant) so graded nDCG is exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

TOPICS: dict[str, list[tuple[str, str]]] = {
    "volcano": [
        ("Volcanic eruptions", "Magma rises through the crust and erupts from a volcano as lava, ash and gas."),
        ("Lava flows", "Basaltic lava flows spread from shield volcanoes such as those of Hawaii."),
        ("Volcanic ash", "Ash clouds from explosive eruptions ground aircraft and cool the climate."),
        ("Calderas", "A caldera forms when a volcano collapses into its emptied magma chamber."),
    ],
    "bees": [
        ("Honeybee colonies", "A honeybee hive has one queen, thousands of worker bees and a few drones."),
        ("Pollination", "Bees carry pollen between flowers while collecting nectar, pollinating crops."),
        ("The waggle dance", "Forager bees perform a waggle dance to tell the hive where flowers are."),
        ("Making honey", "Worker bees turn nectar into honey and store it in wax honeycomb cells."),
    ],
    "chess": [
        ("Chess openings", "The Sicilian Defence and the Queen's Gambit are popular chess openings."),
        ("Checkmate", "A chess game ends in checkmate when the king is attacked and cannot escape."),
        ("Chess engines", "Chess engines search millions of positions per second to choose a move."),
        ("Endgames", "In chess endgames a king and pawn against a lone king is often winning."),
    ],
    "bread": [
        ("Sourdough starter", "A sourdough starter is flour and water fermented by wild yeast and bacteria."),
        ("Kneading dough", "Kneading bread dough develops gluten so the loaf can trap gas and rise."),
        ("Baking bread", "Bread bakes in a hot oven until the crust browns and the crumb sets."),
        ("Yeast fermentation", "Baker's yeast ferments sugars in dough, releasing carbon dioxide bubbles."),
    ],
    "blackhole": [
        ("Black holes", "A black hole is a region of spacetime whose gravity lets nothing escape."),
        ("Event horizon", "The event horizon is the boundary around a black hole beyond which light is trapped."),
        ("Hawking radiation", "Hawking predicted that black holes slowly evaporate by emitting radiation."),
        ("Supermassive black holes", "Supermassive black holes sit at the centres of galaxies like the Milky Way."),
    ],
    "tides": [
        ("Ocean tides", "Tides are the rise and fall of sea level caused by the Moon's gravity."),
        ("Spring tides", "Spring tides occur when the Sun and Moon align, giving the highest high tides."),
        ("Tidal range", "The Bay of Fundy has the largest tidal range in the world."),
        ("Tidal power", "Tidal power stations generate electricity from the flow of the tides."),
    ],
    "jazz": [
        ("Jazz improvisation", "Jazz musicians improvise solos over the chord changes of a tune."),
        ("Bebop", "Bebop jazz, led by Charlie Parker, used fast tempos and complex harmony."),
        ("Swing era", "Big bands of the swing era played jazz for dancing in the 1930s."),
        ("Jazz trumpet", "Louis Armstrong and Miles Davis were famous jazz trumpet players."),
    ],
    "glacier": [
        ("Glaciers", "A glacier is a slow river of ice formed from compacted snow over centuries."),
        ("Glacial erosion", "Glaciers carve U-shaped valleys and fjords as the ice grinds the bedrock."),
        ("Retreating glaciers", "Mountain glaciers are retreating and melting as the climate warms."),
        ("Ice sheets", "The Antarctic and Greenland ice sheets hold most of the world's glacier ice."),
    ],
    "photosynthesis": [
        ("Photosynthesis", "Plants use sunlight to turn carbon dioxide and water into sugar and oxygen."),
        ("Chlorophyll", "Chlorophyll in chloroplasts absorbs red and blue light for photosynthesis."),
        ("Calvin cycle", "The Calvin cycle fixes carbon dioxide into sugars in plant leaves."),
        ("Leaves and stomata", "Leaves open stomata to take in carbon dioxide for photosynthesis."),
    ],
}

#: Judged queries: id → (text, topic). The query's topic is the one whose documents must rank first.
QUERIES: dict[str, tuple[str, str]] = {
    "q-volcano": ("what happens when a volcano erupts lava", "volcano"),
    "q-bees": ("how do honeybees make honey in the hive", "bees"),
    "q-chess": ("chess checkmate of the king", "chess"),
    "q-bread": ("sourdough bread dough with yeast", "bread"),
    "q-blackhole": ("can light escape a black hole event horizon", "blackhole"),
    "q-tides": ("why does the Moon cause ocean tides", "tides"),
    "q-jazz": ("jazz musicians improvising solos", "jazz"),
    "q-glacier": ("glacier ice carving valleys", "glacier"),
    "q-photo": ("how do plant leaves do photosynthesis", "photosynthesis"),
}
#: A query without judgments: evaluate must skip it.
UNJUDGED = ("q-unjudged", "bread baked in an oven")


def doc_id(topic: str, i: int) -> str:
    return f"{topic}-{i}"


def topic_of(doc: str) -> str:
    return doc.rsplit("-", 1)[0]


def make_qrels() -> dict[str, dict[str, int]]:
    """Grades 2 for the first two documents of the topic, 1 for the third, 0 for one judged
    off-topic document (the fourth stays unjudged)."""
    qrels: dict[str, dict[str, int]] = {}
    topics = list(TOPICS)
    for qid, (_, topic) in QUERIES.items():
        other = topics[(topics.index(topic) + 1) % len(topics)]
        qrels[qid] = {doc_id(topic, 0): 2, doc_id(topic, 1): 2, doc_id(topic, 2): 1, doc_id(other, 0): 0}
    return qrels


def write_collection(root: Path) -> Path:
    """Writes the collection in BEIR layout under `root` and returns it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "corpus.jsonl", "w") as f:
        for topic, docs in TOPICS.items():
            for i, (title, text) in enumerate(docs):
                f.write(json.dumps({"_id": doc_id(topic, i), "title": title, "text": text}) + "\n")
    with open(root / "queries.jsonl", "w") as f:
        for qid, (text, _) in [*QUERIES.items(), (UNJUDGED[0], (UNJUDGED[1], ""))]:
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, judged in make_qrels().items():
            for doc, grade in judged.items():
                f.write(f"{qid}\t{doc}\t{grade}\n")
    return root
