"""The generic evaluation-dataset format: ``corpus.jsonl``, ``questions.jsonl``, ``manifest.json``.

A dataset is a directory::

    corpus.jsonl       one passage per line: {"id", "title", "text", "tenant"?}
    questions.jsonl    one labelled question per line:
                       {"id", "question", "answerable", "gold_ids", "kind"?, "answer"?,
                        "split"?, "meta"?}
    manifest.json      optional: how the dataset was built (counts, seed, sources, hashes)

The full specification, with the rules this module enforces, is ``docs/datasets.md``.
``corpus.jsonl`` is also valid input for ``candor ingest`` (it reads ``id``, ``title``, ``text``).

Loading validates every line and reports *all* problems at once, each as ``path:line: message``,
so a hand-written dataset can be fixed in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, get_args

from candor.runtime.validation import TENANT

Kind = Literal["answerable", "topic_absent", "near_miss", "unanswerable"]
"""What a question tests. ``unanswerable`` is the default for a negative whose kind is not given."""
Split = Literal["train", "test"]

KINDS: tuple[Kind, ...] = get_args(Kind)
NEGATIVE_KINDS: tuple[Kind, ...] = ("topic_absent", "near_miss", "unanswerable")
SPLITS: tuple[Split, ...] = get_args(Split)

CORPUS_FILE = "corpus.jsonl"
QUESTIONS_FILE = "questions.jsonl"
MANIFEST_FILE = "manifest.json"

_CORPUS_FIELDS = frozenset({"id", "title", "text", "tenant"})
# Accepted and ignored: the extra fields `candor ingest` understands, and free-form `meta`.
_CORPUS_PASSTHROUGH = frozenset({"uri", "source_kind", "question", "meta"})
_QUESTION_FIELDS = frozenset(
    {"id", "question", "answerable", "gold_ids", "kind", "answer", "split", "tenant", "meta"}
)
_MAX_REPORTED = 25


@dataclass(frozen=True)
class Passage:
    """One document of the knowledge base to index."""

    id: str
    """Unique within the corpus; the document id the retrieval stack reports back."""
    title: str
    """May be empty (the source has none)."""
    text: str
    """Non-empty body text."""
    tenant: str | None = None
    """Tenant to ingest the passage under; ``None`` means the evaluation's default tenant."""

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"id": self.id, "title": self.title, "text": self.text}
        if self.tenant is not None:
            row["tenant"] = self.tenant
        return row


@dataclass(frozen=True)
class Question:
    """One labelled question."""

    id: str
    question: str
    answerable: bool
    """True when the corpus holds a passage that answers it."""
    gold_ids: tuple[str, ...]
    """Passages that answer it: non-empty iff ``answerable``; every id is in the corpus."""
    kind: Kind
    """``answerable`` iff ``answerable``; negatives are ``topic_absent``, ``near_miss`` or
    (when the file does not say) ``unanswerable``."""
    answer: str | None = None
    """Reference answer, when known (only for answerable questions in builders here)."""
    split: Split | None = None
    """``train`` (fit/calibrate on it) or ``test`` (report on it); ``None`` = unsplit."""
    tenant: str | None = None
    """Tenant to ask in; ``None`` means the evaluation's default tenant. An answerable
    question's gold passages must be in its tenant (a tenant sees only its own passages)."""
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Free-form, builder-specific details (JSON object), carried through untouched."""

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "answerable": self.answerable,
            "gold_ids": list(self.gold_ids),
            "kind": self.kind,
        }
        if self.answer is not None:
            row["answer"] = self.answer
        if self.split is not None:
            row["split"] = self.split
        if self.tenant is not None:
            row["tenant"] = self.tenant
        if self.meta:
            row["meta"] = dict(self.meta)
        return row


@dataclass(frozen=True)
class Dataset:
    """A loaded, validated dataset."""

    corpus: tuple[Passage, ...]
    questions: tuple[Question, ...]
    manifest: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)
    path: Path | None = field(default=None, compare=False)

    def split(self, name: Split | None) -> list[Question]:
        """The questions of one split (``None``: every question, whatever its split)."""
        if name is None:
            return list(self.questions)
        return [q for q in self.questions if q.split == name]

    def passages_by_id(self) -> dict[str, Passage]:
        """The corpus as a dict keyed by passage id."""
        return {p.id: p for p in self.corpus}


def _line_order(problem: str) -> tuple[int, int]:
    """Sort key: corpus before questions before anything else, then by line number."""
    head, _, rest = problem.partition(".jsonl:")
    order = 0 if head.endswith("corpus") else 1 if head.endswith("questions") else 2
    line = rest.split(":", 1)[0]
    return order, int(line) if line.isdigit() else 0


class DatasetFormatError(ValueError):
    """One or more invalid lines; ``problems`` holds each as ``path:line: message``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = sorted(problems, key=_line_order)
        shown = self.problems[:_MAX_REPORTED]
        more = len(self.problems) - len(shown)
        text = "\n".join(shown) + (f"\n... and {more} more" if more > 0 else "")
        super().__init__(f"{len(self.problems)} problem(s) in dataset:\n{text}")


# ---------------------------------------------------------------------------------------------
# Reading


def jsonl_objects(
    path: Path, problems: list[str], unread: list[Path] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each JSON object line; problems (path:line: why) are appended,
    not raised. A file that cannot be read at all is also appended to ``unread``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
        if unread is not None:
            unread.append(path)
        return
    except OSError as exc:  # a directory given for the file, a permission, ...
        problems.append(f"{path}: cannot read ({exc.strerror or exc})")
        if unread is not None:
            unread.append(path)
        return
    try:
        # utf-8-sig: a byte-order mark, as some editors write, is not part of the first row.
        # Lines end at "\n" only: str.splitlines also breaks at U+2028, U+2029 and U+0085,
        # which JSON allows raw inside strings (our own writer leaves them so).
        lines = [line.removesuffix("\r") for line in raw.decode("utf-8-sig").split("\n")]
    except UnicodeDecodeError as exc:
        at = raw[: exc.start].count(b"\n") + 1
        problems.append(f"{path}:{at}: not UTF-8 ({exc.reason} at byte {exc.start})")
        if unread is not None:
            unread.append(path)
        return
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{n}: invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            problems.append(f"{path}:{n}: JSON nested too deeply")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            continue
        try:
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            # "\ud800" alone is valid JSON but no text: it failed later, in indexing.
            problems.append(f"{path}:{n}: a lone surrogate escape (\\ud800-\\udfff) is not text")
            continue
        yield n, row


def _nonempty_str(row: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str | None:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: '{key}' must be a non-empty string")
        return None
    return value


def _tenant(row: Mapping[str, Any], where: str, problems: list[str]) -> str | None:
    """The row's tenant, which must be one the services accept: it names the tenant's index
    directory on the embedded stores, so "a/b" or ".." would be a path."""
    value = row.get("tenant")
    if value is not None and (not isinstance(value, str) or not TENANT.fullmatch(value)):
        problems.append(f"{where}: 'tenant' must be 1-64 letters, digits, '_', '.', '-' when given")
        return None
    return value


def _parse_passage(row: dict[str, Any], where: str, problems: list[str]) -> Passage | None:
    before = len(problems)
    unknown = set(row) - _CORPUS_FIELDS - _CORPUS_PASSTHROUGH
    if unknown:
        problems.append(
            f"{where}: unknown field(s) {sorted(unknown)} (allowed: "
            f"{', '.join(sorted(_CORPUS_FIELDS | _CORPUS_PASSTHROUGH))}; put anything else "
            "under 'meta')"
        )
    pid = _nonempty_str(row, "id", where, problems)
    text = _nonempty_str(row, "text", where, problems)
    title = row.get("title")
    if not isinstance(title, str):
        problems.append(f"{where}: 'title' must be a string (may be empty)")
    tenant = _tenant(row, where, problems)
    if len(problems) > before or pid is None or text is None or not isinstance(title, str):
        return None
    return Passage(id=pid, title=title, text=text, tenant=tenant)


def _parse_question(row: dict[str, Any], where: str, problems: list[str]) -> Question | None:
    before = len(problems)
    unknown = set(row) - _QUESTION_FIELDS
    if unknown:
        problems.append(
            f"{where}: unknown field(s) {sorted(unknown)} "
            f"(allowed: {', '.join(sorted(_QUESTION_FIELDS))}; put extras under 'meta')"
        )
    qid = _nonempty_str(row, "id", where, problems)
    text = _nonempty_str(row, "question", where, problems)
    answerable = row.get("answerable")
    if not isinstance(answerable, bool):
        problems.append(f"{where}: 'answerable' must be true or false")
    gold = row.get("gold_ids")
    if not isinstance(gold, list) or not all(isinstance(g, str) and g for g in gold):
        problems.append(f"{where}: 'gold_ids' must be a list of non-empty strings")
        gold = None
    elif len(set(gold)) != len(gold):
        problems.append(f"{where}: 'gold_ids' has duplicates")
    if isinstance(answerable, bool) and gold is not None:
        if answerable and not gold:
            problems.append(f"{where}: an answerable question needs at least one gold id")
        if not answerable and gold:
            problems.append(f"{where}: an unanswerable question must have empty 'gold_ids'")
    kind = row.get("kind")
    if kind is None and isinstance(answerable, bool):
        kind = "answerable" if answerable else "unanswerable"
    if kind is None:
        pass  # 'answerable' is already reported
    elif kind not in KINDS:
        problems.append(f"{where}: 'kind' must be one of {', '.join(KINDS)}")
    elif isinstance(answerable, bool) and (kind == "answerable") != answerable:
        problems.append(
            f"{where}: 'kind' {kind!r} contradicts 'answerable': {str(answerable).lower()}"
        )
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        problems.append(f"{where}: 'answer' must be a string when given")
    split = row.get("split")
    if split is not None and split not in SPLITS:
        problems.append(f"{where}: 'split' must be 'train' or 'test' when given")
    tenant = _tenant(row, where, problems)
    meta = row.get("meta", {})
    if not isinstance(meta, dict):
        problems.append(f"{where}: 'meta' must be a JSON object when given")
    if len(problems) > before or qid is None or text is None or gold is None:
        return None
    return Question(
        id=qid,
        question=text,
        answerable=cast(bool, answerable),
        gold_ids=tuple(gold),
        kind=cast(Kind, kind),
        answer=cast("str | None", answer),
        split=cast("Split | None", split),
        tenant=tenant,
        meta=cast(dict[str, Any], meta),
    )


def _check_unique(
    items: Iterable[tuple[str, str]], what: str, problems: list[str]
) -> dict[str, str]:
    first: dict[str, str] = {}
    for item_id, where in items:
        if item_id in first:
            problems.append(f"{where}: duplicate {what} id {item_id!r} (first at {first[item_id]})")
        else:
            first[item_id] = where
    return first


_Item = TypeVar("_Item")


def _read(
    path: Path,
    what: str,
    parse: Callable[[dict[str, Any], str, list[str]], _Item | None],
    problems: list[str],
    unread: list[Path] | None = None,
) -> list[tuple[_Item, str]]:
    """Parse every row of ``path`` with ``parse``; ids must be unique across the file."""
    out: list[tuple[_Item, str]] = []
    ids = []
    for n, row in jsonl_objects(path, problems, unread):
        where = f"{path}:{n}"
        if isinstance(row.get("id"), str):
            ids.append((row["id"], where))
        item = parse(row, where, problems)
        if item is not None:
            out.append((item, where))
    _check_unique(ids, what, problems)
    return out


def _read_corpus(
    path: Path, problems: list[str], unread: list[Path] | None = None
) -> list[tuple[Passage, str]]:
    return _read(path, "passage", _parse_passage, problems, unread)


def _read_questions(path: Path, problems: list[str]) -> list[tuple[Question, str]]:
    return _read(path, "question", _parse_question, problems)


def load_corpus(path: Path | str) -> list[Passage]:
    """Read and validate a ``corpus.jsonl`` (raises :class:`DatasetFormatError`)."""
    problems: list[str] = []
    rows = _read_corpus(Path(path), problems)
    if problems:
        raise DatasetFormatError(problems)
    return [p for p, _ in rows]


def load_questions(path: Path | str) -> list[Question]:
    """Read and validate a ``questions.jsonl`` on its own (gold ids are not checked)."""
    problems: list[str] = []
    rows = _read_questions(Path(path), problems)
    if problems:
        raise DatasetFormatError(problems)
    return [q for q, _ in rows]


def _ids_in_file(path: Path) -> set[str]:
    """Every string ``id`` in a JSONL file, its rows valid or not."""
    return {row["id"] for _, row in jsonl_objects(path, []) if isinstance(row.get("id"), str)}


def load_dataset(directory: Path | str, *, partial_split: bool = False) -> Dataset:
    """Read and validate a dataset directory, including that every gold id is in the corpus.

    Raises :class:`DatasetFormatError` listing every problem found (``path:line: message``).
    ``partial_split``: load one whose questions are split in part (only to split it again).
    """
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise DatasetFormatError(
            [f"{root}: not a dataset directory (one holding {CORPUS_FILE} and {QUESTIONS_FILE})"]
        )
    problems: list[str] = []
    unread: list[Path] = []
    corpus = _read_corpus(root / CORPUS_FILE, problems, unread)
    corpus_rows_in_error = bool(problems)
    questions = _read_questions(root / QUESTIONS_FILE, problems)
    if not questions and (root / QUESTIONS_FILE).exists():
        problems.append(f"{root / QUESTIONS_FILE}: no questions")
    if not corpus and not unread and not problems:
        # Every question would be refused, by every policy, "always answer" included.
        problems.append(f"{root / CORPUS_FILE}: no passages")
    unsplit = [where for q, where in questions if q.split is None]
    if unsplit and len(unsplit) < len(questions) and not partial_split:
        # Reports and calibrate read one split: the unsplit questions were silently left out.
        problems.append(
            f"{unsplit[0]}: {len(unsplit)} of {len(questions)} questions have no 'split' while "
            "the rest do: give every question a split or none (`candor eval prepare split "
            "--resplit` draws them all again)"
        )
    tenant_of = {p.id: p.tenant for p, _ in corpus}
    # A corpus file that could not be read would make every gold id "missing" too, and so
    # would a passage whose own row is in error (a `txt` typo): that row is reported already.
    # Only then is the file read again, for the ids of its rows in error.
    corpus_read = not unread
    in_file = _ids_in_file(root / CORPUS_FILE) if corpus_read and corpus_rows_in_error else set()
    for q, where in questions:
        missing = [g for g in q.gold_ids if g not in tenant_of and g not in in_file]
        if missing and corpus_read:
            problems.append(f"{where}: gold id(s) {missing} not in {CORPUS_FILE}")

    manifest: dict[str, Any] | None = None
    manifest_path = root / MANIFEST_FILE
    if manifest_path.exists():
        try:
            loaded = json.loads(manifest_path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as exc:
            problems.append(f"{manifest_path}:{exc.lineno}: invalid JSON ({exc.msg})")
        except UnicodeDecodeError as exc:
            problems.append(f"{manifest_path}: not UTF-8 ({exc.reason} at byte {exc.start})")
        else:
            if isinstance(loaded, dict):
                manifest = loaded
            else:
                problems.append(f"{manifest_path}: expected a JSON object")
    if problems:
        raise DatasetFormatError(problems)
    return Dataset(
        corpus=tuple(p for p, _ in corpus),
        questions=tuple(q for q, _ in questions),
        manifest=manifest,
        path=root,
    )


def check_tenants(dataset: Dataset, default: str) -> None:
    """Every answerable question's gold passages are in the tenant it is asked in.

    Passages are indexed under their tenant (``default`` when they name none) and a question
    is asked in its own: a gold passage in another tenant can never be found, and every policy
    would be scored against an answer no retrieval could see. Raises DatasetFormatError.
    """
    tenant_of = {p.id: p.tenant or default for p in dataset.corpus}
    file = dataset.path / QUESTIONS_FILE if dataset.path is not None else QUESTIONS_FILE
    problems = []
    if not TENANT.fullmatch(default):
        problems.append(
            f"the default tenant {default!r} is not 1-64 letters, digits, '_', '.', '-'"
        )
    for q in dataset.questions:
        asked = q.tenant or default
        elsewhere = [g for g in q.gold_ids if tenant_of.get(g, asked) != asked]
        if elsewhere:
            problems.append(
                f"{file}: question {q.id!r}: gold passage(s) "
                f"{elsewhere} are in tenant "
                f"{tenant_of[elsewhere[0]]!r} but the question is asked in {asked!r}: give the "
                "question that 'tenant'"
            )
    if problems:
        raise DatasetFormatError(problems)


# ---------------------------------------------------------------------------------------------
# Writing


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    tmp.replace(path)


def write_corpus(path: Path | str, corpus: Iterable[Passage]) -> None:
    """Write ``corpus.jsonl`` (atomically: a temp file renamed into place)."""
    _write_jsonl(Path(path), (p.to_json() for p in corpus))


def write_questions(path: Path | str, questions: Iterable[Question]) -> None:
    """Write ``questions.jsonl`` (atomically)."""
    _write_jsonl(Path(path), (q.to_json() for q in questions))


def write_dataset(
    directory: Path | str,
    corpus: Sequence[Passage],
    questions: Sequence[Question],
    manifest: Mapping[str, Any] | None = None,
) -> Path:
    """Write a dataset directory (created if missing) and return its path."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    write_corpus(root / CORPUS_FILE, corpus)
    write_questions(root / QUESTIONS_FILE, questions)
    if manifest is not None:
        write_manifest(root, manifest)
    return root


def write_manifest(directory: Path | str, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` into a dataset directory (atomically)."""
    root = Path(directory)
    tmp = root / (MANIFEST_FILE + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")
    tmp.replace(root / MANIFEST_FILE)
