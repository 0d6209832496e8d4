"""Following links offline: names in the best passages that are other documents' titles, read next."""

from __future__ import annotations

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document, Hit
from agent_retrieval.planning import PlannedQuery, QueryPlan, run_plan
from agent_retrieval.planning.execution import COMPARED, NAMED, READING_ON
from agent_retrieval.planning.links import (
    bridge_names,
    carried,
    compared,
    compares,
    compares_through,
    find_links,
    given_names,
    names,
    relations,
    shorter_form,
    title_forms,
)
from agent_retrieval.search.retrieval import Retrieval

# A three-hop chain linked by titles (album -> its performer -> his spouse), a two-hop one through a name
# that is no title (a role -> the actress -> her sister), and distractors sharing the questions' words.
CORPUS = {
    "green": ("Green (album)", "Green is the fourth studio album by Steve Hillage, released in 1978."),
    "hillage": ("Steve Hillage", "Steve Hillage is an English guitarist. He married Miquette Giraudy."),
    "giraudy": ("Miquette Giraudy", "Miquette Giraudy is a French keyboard player and synthesizer artist."),
    "wall": ("Green Wall", "A wall painted green in Leeds, where a performer once lived."),
    "day": ("Green Day", "Green Day is a punk band from California."),
    "blue": ("Blue (album)", "Blue is an album recorded by a performer live."),
    "red": ("Red (album)", "Red is an album by a performer."),
    "miracle": ("Miracle on 34th Street", "Natalie Wood as Susan Walker; Maureen O'Hara as Doris Walker."),
    "exercise": ("Five Finger Exercise", "Lana Wood, sister to Natalie Wood, appears early."),
}
QUESTION = "Who is the spouse of the performer of the album Green?"


@pytest.fixture
def stored(tmp_path, embedder):
    """A store of a corpus ({id: (title, text)}), each document's metadata given by `metadata(id)`."""

    def make(corpus: dict[str, tuple[str, str]], metadata=lambda _: {}, **settings) -> Retrieval:
        context = Context(db_path=str(tmp_path / "links.db"), **settings)
        retrieval = Retrieval(context, embedder=embedder)
        docs = [Document(i, title, text, metadata(i)) for i, (title, text) in corpus.items()]
        ingest(docs, retrieval.store, embedder, context, progress=False)
        return retrieval

    return make


@pytest.fixture
def chain(stored):
    return lambda **settings: stored(
        CORPUS, lambda i: {"shelf": "music" if i != "giraudy" else "people"}, **settings
    )


async def ask(retrieval: Retrieval, question: str = QUESTION, filters: dict | None = None, top_k: int = 6):
    return await run_plan(
        QueryPlan(intent="t", queries=[PlannedQuery(text=question)], filters=filters or {}),
        retrieval,
        top_k=top_k,
    )


def test_names_are_runs_of_capitalised_words_with_the_small_words_names_hold():
    text = "Houston Baptist University owns The Collegian. It was founded by the Bank of England in 1960."
    assert names(text) == ["Houston Baptist University", "The Collegian", "It", "Bank of England", "1960"]


@pytest.mark.parametrize(
    ("title", "forms"),
    [
        ("Green (album)", ["green"]),
        ("Mountrail County, North Dakota", ["mountrail county, north dakota", "mountrail county"]),
        ("Steve Hillage", ["steve hillage"]),
        ("U2", []),  # too short to be recognised in prose
    ],
)
def test_a_title_is_recognised_by_its_plain_forms(title, forms):
    assert title_forms(title) == forms


def test_bridge_names_are_the_names_a_passage_meeting_the_question_gives_first():
    passage = Hit(
        "m#0", "chunks", "m", "Miracle", "In 1947. Natalie Wood as Susan Walker; later, Maureen O'Hara."
    )
    question = "Who is the sibling of the actress who played Susan Walker?"
    # not "In" (a sentence's first word), not 1947 (a number), not Susan Walker (the question's own)
    assert bridge_names(passage, question, per_source=3) == ["Natalie Wood", "Maureen O'Hara"]
    assert bridge_names(passage, "nothing shared", per_source=3) == []
    mach = Hit(
        "n#0",
        "chunks",
        "n",
        "Mach number",
        "The Mach number is named after Austrian physicist and philosopher Ernst Mach, and is a "
        "designation proposed by aeronautical engineer Jakob Ackeret on 4 July 1929.",
    )
    # "Ernst Mach" holds a word of the question but is not its own name; "Austrian" is an adjective; the
    # passage's first name answers "the physicist who Mach number is named after"
    asked = "Who is the employer of the physicist who Mach number is named after?"
    assert bridge_names(mach, asked, per_source=3) == ["Ernst Mach", "Jakob Ackeret"]
    painting = Hit(
        "r#0",
        "chunks",
        "r",
        "Ruby Loftus Screwing a Breech Ring",
        "Ruby Loftus Screwing a Breech Ring is a 1943 painting by the British painter Laura Knight of a "
        "woman at a lathe. Ruby Loftus later worked at the Royal Ordnance Factory in Blackburn.",
    )
    # the name the passage gives first, not the one nearest the question's words
    asked = "Who was married to the creator of Ruby Loftus Screwing a Breech Ring?"
    assert bridge_names(painting, asked, per_source=1) == ["Laura Knight"]


def test_the_next_hop_asks_for_the_name_given_with_what_the_passage_did_not_answer():
    passage = Hit("t#0", "chunks", "t", "Tenement (band)", "Tenement is a punk band founded in Appleton.")
    question = "What is the seat of the county sharing a border with the county where Tenement was founded?"
    # the passage answered "where Tenement was founded"; the chain goes on from Appleton
    assert carried(question, passage, "Appleton") == "Appleton seat county sharing border"
    whole = Hit("w#0", "chunks", "w", "Seat", "Seat of a county sharing a border where Tenement was founded")
    assert carried(question, whole, "Appleton") == f"{question} Appleton"  # nothing left: as asked, with it
    claim = "Tenement was founded in the county bordering the seat."  # a statement asks for nothing
    assert carried(claim, passage, "Appleton") == f"{claim} Appleton"


async def test_a_second_hop_reads_the_document_the_first_one_names_by_title(chain):
    run = await ask(chain())  # max_hops 2: the plan's search, then one round
    ids = [hit.document_id for hit in run.chunks]
    assert ids[:2] == ["green", "hillage"] and len(ids) == 6  # right after the passage that names it
    assert "giraudy" not in ids  # a third hop needs a third round
    assert (run.searches[-1].hop, run.searches[-1].hit_ids) == (1, ["hillage#0"])
    assert any("read on to 1 document(s)" in note for note in run.notes)


@pytest.mark.parametrize(
    ("question", "nested"),
    [
        (QUESTION, 2),  # the spouse of (the performer of (Green))
        ("What is the seat of the county sharing a border with the county where Tenement was founded?", 3),
        (
            "What is the name of the castle in the city where the creator of Scanderbeg died?",
            3,
        ),  # no "name of"
        ("The performer of Green was born where?", 1),
        ("Who wrote Green?", 0),
    ],
)
def test_a_question_nests_a_relation_for_each_hop_of_its_chain(question, nested):
    assert relations(question) == nested


async def test_each_round_a_deeper_question_needs_reads_on_from_what_the_last_one_found(chain):
    deeper = "Who is the sister of the spouse of the performer of the album Green?"  # three relations
    ids = [hit.document_id for hit in (await ask(chain(max_hops=3), deeper)).chunks]
    assert ids[:3] == ["green", "hillage", "giraudy"]  # the whole chain first
    assert "giraudy" not in [hit.document_id for hit in (await ask(chain(max_hops=2), deeper)).chunks]


async def test_a_question_nesting_two_relations_reads_on_one_round_whatever_max_hops_leaves(chain):
    # the album's passage answers "the performer of Green", one round reads the performer's: a second
    # round would only push the question's own passages down
    run = await ask(chain(max_hops=3))
    assert "giraudy" not in [hit.document_id for hit in run.chunks]
    assert [s.hop for s in run.searches if s.purpose == READING_ON] == [1]


async def test_reading_on_starts_from_the_passages_holding_what_the_question_names(stored):
    # A passage sharing the question's other words ranks high but is about something else: what it names
    # (a pianist) is no link of the question's chain.
    talk = (
        "Performers and spouses",
        "Who is the spouse of a performer of an album? The answer is Jools Holland.",
    )
    pianist = ("Jools Holland", "Jools Holland is a pianist and bandleader.")
    run = await ask(stored({**CORPUS, "talk": talk, "jools": pianist}))
    ids = [hit.document_id for hit in run.chunks]
    assert "talk" in ids[:3] and "hillage" in ids  # the talk is a best hit; the chain is still read on
    assert "jools" not in ids


async def test_without_following_links_the_named_documents_are_not_found(chain):
    # the control: the question's own words reach neither later document
    run = await ask(chain(follow_links=0))
    assert {"hillage", "giraudy"}.isdisjoint(hit.document_id for hit in run.chunks) and len(run.searches) == 1


@pytest.mark.parametrize(
    ("name", "shorter"),
    [
        ("Glenn L. Martin Company for the United States Navy", "Glenn L. Martin Company"),
        ("South Carolina Senate", "South Carolina"),
        ("Lorenzo Costa the Elder", "Lorenzo Costa"),
        ("Bank of England", None),  # a bank, not England
        ("Michael J. Fox", None),  # nor a name ending in an initial
        ("Steve Hillage", None),
    ],
)
def test_a_name_has_a_shorter_form_a_later_passage_may_use(name, shorter):
    assert shorter_form(name) == shorter


async def test_a_name_no_passage_holds_whole_is_followed_by_its_shorter_form(stored):
    corpus = {
        "oriole": (
            "AAM-N-4 Oriole",
            "The AAM-N-4 Oriole was a missile developed by the Glenn L. Martin Company for the United States "
            "Navy.",
        ),
        "marietta": (
            "Martin Marietta",
            "Martin Marietta was founded in 1961 by the merger of Glenn L. Martin Company and American "
            "Marietta Corporation.",
        ),
    }
    run = await ask(stored(corpus), "Which company followed the company that made AAM-N-4 Oriole?", top_k=1)
    # the question's own search ranks the missile first; the company the passage names, by its first part,
    # is what reading on adds
    assert [hit.document_id for hit in run.chunks] == ["oriole", "marietta"]
    assert run.searches[-1].purpose == READING_ON and run.searches[-1].hit_ids == ["marietta#0"]


async def test_a_name_that_is_no_title_is_searched_beside_the_question(chain):
    question = "Who is the sibling of the actress who played Susan Walker in Miracle on 34th Street?"
    assert "exercise" not in [h.document_id for h in (await ask(chain(follow_links=0), question)).chunks]
    run = await ask(chain(), question)
    ids = [hit.document_id for hit in run.chunks]
    # the film's passage holds what the question names: the chain's start, read on from; a name searched
    # beside the question is a weaker lead than a title, placed after every passage read on from
    assert ids[0] == "miracle" and "exercise" in ids[1:]
    # Maureen O'Hara was searched too, but nothing else holds her name: only what holds it is read on to
    assert run.searches[-1].hit_ids == ["exercise#0"]


@pytest.mark.parametrize(
    ("question", "comparison"),
    [
        ("Which magazine was started first, Arthur's Magazine or First for Women?", True),
        ("Were Scott Derrickson and Ed Wood of the same nationality?", True),
        ("Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?", True),
        # multi-hop questions that only say "same" or "both", and choices that name nothing
        ("What is the salary of a citizen of the same nationality as the author of Walden?", False),
        ("Who has played for both West Ham and the team that Adam Hammill is on?", False),
        ("Is the deposit protected or not?", False),
        ("Should I pay the fee or the deposit first?", False),
    ],
)
def test_a_comparison_is_a_question_joining_two_names(question, comparison):
    assert compares(question) is comparison


@pytest.mark.parametrize(
    ("question", "names"),
    [
        (
            "Are both Hajjiabad, Jask and Yalghuz Aghaj located in the same country?",
            ["Hajjiabad, Jask", "Yalghuz Aghaj"],
        ),
        (
            "Who is younger, Daniel Darc or Thomas Worthington (Governor)?",
            ["Daniel Darc", "Thomas Worthington (Governor)"],
        ),
        (
            "Are director of film Amistad (Film) and director of film Hidden Valley Outlaws both from Peru?",
            ["Amistad (Film)", "Hidden Valley Outlaws"],
        ),
        ("Who was born first out of Arthur Schneider and Julien Cardy?", []),
    ],
)
def test_the_compared_things_are_named_as_titles_are(question, names):
    assert compared(question) == names


async def test_a_comparison_is_not_read_on_from(chain):
    # Green's passage names Steve Hillage, whom a comparison of two albums never asked about
    question = "Which album came first, Green or Blue?"
    run = await ask(chain(), question)
    assert "hillage" not in [hit.document_id for hit in run.chunks]
    assert READING_ON not in [search.purpose for search in run.searches]
    assert any("compares what it names" in note for note in run.notes)
    named = await ask(chain(), "Which album did Green follow?")  # the control: the same names, no comparison
    assert "hillage" in [hit.document_id for hit in named.chunks]


@pytest.mark.parametrize(
    ("question", "through"),
    [
        ("Which film has the director who died first, Dawn or Dusk?", True),
        ("Are the directors of films Dawn and Dusk from the same country?", True),
        ("Do both films Dawn and Dusk have the directors from the same country?", True),
        ("Which film whose director was born first, Dawn or Dusk?", True),
        ("Were Scott Derrickson and Ed Wood of the same nationality?", False),
        ("Do Tapani Vuorenhela and Deb Vanasse have the same nationality?", False),
        ("Who was born first out of Arthur Schneider and Julien Cardy?", False),
        ("Which magazine was started first, Arthur's Magazine or First for Women?", False),
    ],
)
def test_a_comparison_through_what_the_named_things_lead_to_is_told_apart(question, through):
    assert compares_through(question) is through


FILMS = {
    "dawn": (
        "Dawn (film)",
        "Dawn is a 1931 drama starring Al Ash, Bea Bay, Cy Cole, Di Dunn, Ed Eck and Flo Fay, "
        "directed by Ann Roe.",
    ),
    "dusk": (
        "Dusk (film)",
        "Dusk is a 1950 film. Its cast: Ian Ivy, Jo Jay, Kay Kim. It was directed by Bo Lin.",
    ),
    "roe": ("Ann Roe", "Ann Roe was a director, born in 1901 in Leeds."),
    "lin": ("Bo Lin", "Bo Lin was a director, born in 1920 in Porto."),
    "noon": ("Noon (film)", "Noon is a film whose director was born first of all directors."),
}


async def test_a_comparison_of_what_the_named_things_lead_to_reads_on_from_both(stored):
    retrieval = stored(FILMS)
    run = await ask(retrieval, "Which film has the director who was born first, Dawn or Dusk?", top_k=4)
    ids = [hit.document_id for hit in run.chunks]
    # both films first, each with its director right after it, though Dawn's passage names seven others
    # before its director (eight lookups a round): each side reads on with lookups of its own
    assert ids[:4] == ["dawn", "roe", "dusk", "lin"], ids
    plain = await ask(retrieval, "Which film came out first, Dusk or Dawn?", top_k=4)
    # the compared things first, in the question's order; nothing read on from them
    assert [hit.document_id for hit in plain.chunks][:2] == ["dusk", "dawn"]
    assert any("compares what it names" in note for note in plain.notes)
    assert [s.purpose for s in plain.searches][1:] == [COMPARED]  # after the question's own search


async def test_a_document_the_question_names_by_title_comes_first(stored):
    # Two passages quote the book's name more often than its own passage holds the question's words
    corpus = {
        "letters": (
            "Letters",
            "Where did the author die? On The Canon of Medicine, and The Canon of Medicine.",
        ),
        "essays": (
            "Essays",
            "The Canon of Medicine: where its author lived and died. The Canon of Medicine.",
        ),
        "canon": ("The Canon of Medicine", "A medical encyclopedia completed in 1025 by Avicenna."),
        "avicenna": ("Avicenna", "Avicenna died in Hamadan in 1037."),
    }
    run = await ask(stored(corpus), "Where did the author of The Canon of Medicine die?", top_k=4)
    ids = [hit.document_id for hit in run.chunks]
    # the named document first, and the one its passage leads to right after it
    assert ids[:2] == ["canon", "avicenna"], ids
    assert [s.purpose for s in run.searches][1:3] == [NAMED, READING_ON]


async def test_a_question_naming_many_things_looks_up_as_many_titles_as_a_passage_may(stored, monkeypatch):
    """Who sets it: the question's writer (a person or a model). What bounds it: LINK_LOOKUPS names."""
    from agent_retrieval.planning import execution

    retrieval = stored(FILMS)
    looked_up: list[str] = []
    search = retrieval.store.akeyword_search

    async def counted(level, query, *args, **kwargs):
        looked_up.append(query)
        return await search(level, query, *args, **kwargs)

    monkeypatch.setattr(retrieval.store, "akeyword_search", counted)
    many = ", ".join(f"Town{number} Hall" for number in range(40))
    await ask(retrieval, f"the oldest of {many}?")
    named = [query for query in looked_up if query.startswith("Town")]  # not the question's own search
    assert len(named) == execution.LINK_LOOKUPS, named


async def test_what_the_question_found_too_is_read_on_to_first(stored, embedder):
    # Green's passage names Steve Hillage first and The Manor second; the question's own search found The
    # Manor (fourth): with room for one, reading on moves it up rather than push in a document from outside
    corpus = {
        "green": ("Green (album)", "Green is an album by Steve Hillage, recorded at The Manor in 1978."),
        "hillage": ("Steve Hillage", "Steve Hillage is an English guitarist."),
        "manor": ("The Manor", "The Manor is a house in Oxfordshire; an album was once recorded there."),
        "day": ("Green Day", "Green Day is a punk band from California."),
        "blue": ("Blue (album)", "Blue is an album recorded by a performer live."),
        "red": ("Red (album)", "Red is an album by a performer."),
    }
    retrieval = stored(corpus, follow_links=1)
    question = "Who is the performer of the album Green?"
    alone = Retrieval(retrieval.context.replace(follow_links=0), store=retrieval.store, embedder=embedder)
    own = [hit.document_id for hit in (await ask(alone, question)).chunks]
    assert own.index("manor") > 2 and "hillage" not in own
    run = await ask(retrieval, question)
    assert run.searches[-1].hit_ids == ["manor#0"] and "hillage" not in [h.document_id for h in run.chunks]


async def test_reading_on_keeps_to_the_plans_filters(chain):
    run = await ask(chain(max_hops=3), filters={"shelf": "music"})
    ids = [hit.document_id for hit in run.chunks]
    assert "hillage" in ids and "giraudy" not in ids  # named, but on another shelf


async def test_a_title_links_only_where_the_passage_holds_it_as_a_whole_name(chain):
    # looking up "Green Day" finds Green Day, and Green (album) too, whose "Green" is only part of a name
    source = Hit("x#0", "chunks", "x", "Festival", "Green Day played in Leeds.")
    found = await find_links([source], "who played", chain().store, exclude=set(), max_lookups=8)
    assert [(source.id, hit.id) for source, hit in found] == [("x#0", "day")]


async def test_a_name_the_question_holds_is_not_looked_up(chain):
    source = Hit("x#0", "chunks", "x", "Festival", "Green Day played in Leeds.")
    found = await find_links([source], "when did Green Day play", chain().store, exclude=set(), max_lookups=8)
    assert found == []


def test_a_name_keeps_its_initials():
    text = "It stars Michael J. Fox as Marty McFly. He met A. P. J. Abdul Kalam in the U.S. in 2004."
    # not "Michael J" and "Fox" apart (whose passage holds neither), and no sentence joins the next
    assert list(given_names(text, "Who is it?")) == [
        "Michael J. Fox",
        "Marty McFly",
        "A. P. J. Abdul Kalam",
        "U.S",
    ]
    assert names("Directed by K. S. Sethumadhavan. Music by A. R. Rahman.") == [
        "Directed",
        "K. S. Sethumadhavan",
        "Music",
        "A. R. Rahman",
    ]


async def test_a_word_opening_a_sentence_links_to_no_title_and_a_name_after_a_number_does(chain):
    # "Green" opening a sentence is no name of the album Green; "34 of the Steve Hillage" names him
    source = Hit("x#0", "chunks", "x", "Notes", "Green. Played by a band, track 34 of the Steve Hillage.")
    found = await find_links([source], "who played", chain().store, exclude=set(), max_lookups=8)
    assert [hit.id for _, hit in found] == ["hillage"]


def test_a_document_read_on_to_comes_right_after_the_hit_it_was_read_from_and_is_listed_once():
    from agent_retrieval.planning.execution import _placed_after

    hits = [Hit(f"{n}#0", "chunks", n, n, "", score=1 / (i + 1)) for i, n in enumerate("abcde")]
    placed = _placed_after(hits, [(hits[0], hits[4]), (hits[1], hits[3])])
    # chains stay together: a, what a leads to, b, what b leads to
    assert [hit.id for hit in placed] == ["a#0", "e#0", "b#0", "d#0", "c#0"]
    assert placed[1].score == placed[0].score and placed[3].score == placed[2].score  # ranked as its source
    # a document from elsewhere is added: none of the plan's own hits makes way for it
    elsewhere = Hit("z#0", "chunks", "z", "z", "")
    assert [hit.id for hit in _placed_after(hits, [(hits[2], elsewhere)])] == [
        "a#0",
        "b#0",
        "c#0",
        "z#0",
        "d#0",
        "e#0",
    ]
    # read on from a hit no longer listed: at the end
    gone = Hit("g#0", "chunks", "g", "g", "")
    assert [hit.id for hit in _placed_after(hits, [(gone, elsewhere)])][-1] == "z#0"
