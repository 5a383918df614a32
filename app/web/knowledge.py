"""Knowledge: the collections page, a collection with its documents (upload, Stop, Read again,
delete, followed live while they are read), and a passage on its page, which a chip opens."""
from __future__ import annotations

from collections.abc import Sequence

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect
from markupsafe import escape

from ..files import Spooled, clean_name
from ..knowledge.kinds import Unreadable, kind_of
from ..store import Store
from ..tables import Collection, Document, Picks, counted
from . import render, uploads
from .templating import fragment, removal
from .toolkit import attachments, done, form_field, go, me, megabytes, parse_id, worker

NAME_MAX = 200  # the rows' own limits (m036)
DESCRIPTION_MAX = 2000
HEAD = 64 * 1024  # the bytes a document's kind is told from
FILES_MAX = 20  # documents one upload may carry

SAVED = {"created": "Collection created: add documents to it.", "saved": "Saved.", "deleted": "Collection deleted.",
         "removed": "Document deleted."}


def collection_or_404(request: Request, raw: str, change: bool = False) -> Collection:
    """A collection the person may see (their own, or shared); `change`: their own only."""
    found = worker(request).store.collection(parse_id(raw, "collection"))
    if found is None or (found.person != me(request).id and not found.shared):
        raise NotFoundException("No such collection.")
    if change and found.person != me(request).id:
        raise HTTPException(status_code=403, detail="Only the person who made this collection changes it.")
    return found


def document_or_404(request: Request, raw: str, change: bool = False) -> Document:
    """A document the person may see: in a collection they may see, or attached to their conversation."""
    found = worker(request).store.document(parse_id(raw, "document"))
    if found is None:
        raise NotFoundException("No such document.")
    if found.collection is not None:
        collection_or_404(request, str(found.collection), change)
    elif found.person != me(request).id:
        raise NotFoundException("No such document.")
    return found


async def picks_field(request: Request, store: Store, person: int) -> str:
    """The collections and documents picked for a message with "/" (`knowledge` fields: "c3",
    "d7"), as the message keeps them; 400 in words for what is not one, or not the person's
    to pick (another's, or deleted since)."""
    form = await request.form()
    values = [v for v in form.getall("knowledge") if isinstance(v, str)] if "knowledge" in form else []
    try:
        picks = Picks.parse(",".join(values))
    except ValueError as e:
        raise HTTPException(status_code=400, detail=f"Not sent: {e}.") from None
    if store.usable_picks(person, picks) != picks:
        raise HTTPException(status_code=400, detail="Not sent: a collection or document picked for it is not "
                                                    "one you may search (deleted, or unshared since).")
    return str(picks)


def visible(store: Store, document: Document, person: int | None, collections: dict[int, Collection | None]) -> bool:
    """Whether `person` may see a collection's document (its collections looked up once a message)."""
    if person is None or document.collection is None:
        return False
    if document.collection not in collections:
        collections[document.collection] = store.collection(document.collection)
    c = collections[document.collection]
    return c is not None and (c.person == person or c.shared)


def document_html(d: Document, mine: bool) -> str:
    return fragment("_document.html", d=d, mine=mine)


def progress_html(d: Document) -> str:
    return fragment("_document_progress.html", d=d, oob=True)


def document_changes(store: Store, documents: list[Document], person: int | None) -> str:
    """The feed's message for one person's pages: the documents they may see whose reading
    moved, upserted into their collection's list where it is on the page (a new one in its
    place, newest first); a document attached to one of their messages, its progress beside
    its chip (the feed gives those only to its conversation's pages). A document read on past its first page changes only its progress:
    that part alone is sent, so its buttons are not replaced under a person's pointer (a click
    between two pages would be lost). The buttons post through the page's own form."""
    collections: dict[int, Collection | None] = {}
    by_collection: dict[int, list[str]] = {}
    progress, ended = [], []
    for d in documents:
        if d.collection is None and d.chat is not None and d.person == person:
            progress.append(progress_html(d))  # a message's attachment: its chip's progress, on its conversation's page
        elif visible(store, d, person, collections):
            c = collections[d.collection]
            if d.state == "reading" and d.pages_read > 0:
                progress.append(progress_html(d))
            else:
                by_collection.setdefault(d.collection, []).append(
                    document_html(d, mine=c is not None and c.person == person))
                if not d.busy:
                    ended.append(f"{d.name}: {d.progress}.")
    # a reading's end, said to a screen reader (the collection's polite live region): the
    # bar and its words change silently
    said = f'<hx-partial hx-target="#documents-announce">{escape(" ".join(ended))}</hx-partial>' if ended else ""
    return "".join(progress) + "".join(removal(f"documents-none-{c}")
                   + f'<hx-partial hx-target="#documents-{c}" hx-swap="upsert key:data-key sort:desc">'
                   + "".join(items) + "</hx-partial>" for c, items in by_collection.items()) + said


def documents_catch_up(store: Store, person: int | None, cursor: int, top: int, chat: int | None = None) -> str:
    """What a page's stream sends first of the documents whose reading moved after the page's
    cursor (a reading may end between the page's render and its stream's start): a
    collection's, or those attached to the messages of `chat`, the conversation on the page."""
    if not cursor:
        return ""
    moved = [d for d in store.documents_since(cursor, top) if (d.chat == chat if chat else d.collection is not None)]
    return document_changes(store, moved, person)


READ_ATTACHED = ("pdf", "docx")  # the kinds a message's file is read for (text files are sent as they are)


def attach_documents(store: Store, person: int, chat: int, files: Sequence[int], sent: Sequence[Spooled]) -> None:
    """A message's PDF and Word files as documents of its conversation, read before it is
    answered (inside the write that adds the message): the files' ids, and what was uploaded
    in the same order."""
    for file, upload in zip(files, sent):
        try:
            kind = kind_of(upload.head[:HEAD], upload.name)
        except Unreadable:
            continue  # named only, as any file the model cannot read
        if kind in READ_ATTACHED:
            store.add_document(person, file, clean_name(upload.name), chat=chat, kind=kind)


# --- the collections ----------------------------------------------------------------------


@get("/knowledge")
async def knowledge_page(request: Request, saved: FromQuery[str] = "") -> Response:
    return collections_view(request, saved=SAVED.get(saved, ""))


def collections_view(request: Request, status_code: int = 200, saved: str = "",
                     problem: tuple[str, str] | None = None, typed: dict[str, str] | None = None) -> Response:
    s = worker(request)
    return render.page(request, "knowledge.html", status_code=status_code,
                       collections=s.store.collections(me(request).id), saved=saved, problem=problem,
                       typed=typed or {"name": "", "description": ""}, name_max=NAME_MAX,
                       description_max=DESCRIPTION_MAX)


async def typed_collection(request: Request) -> dict[str, str]:
    return {"name": (await form_field(request, "name", 10_000)).strip(),
            "description": (await form_field(request, "description", 20_000)).strip()}


def collection_problem(typed: dict[str, str]) -> tuple[str, str] | None:
    if not typed["name"]:
        return ("name", "A collection needs a name.")
    if len(typed["name"]) > NAME_MAX:
        return ("name", f"The name is too long: at most {NAME_MAX} characters.")
    if len(typed["description"]) > DESCRIPTION_MAX:
        return ("description", f"The description is too long: at most {DESCRIPTION_MAX:,} characters.")
    return None


@post("/knowledge")
async def create_collection(request: Request) -> Response:
    typed = await typed_collection(request)
    if problem := collection_problem(typed):
        return collections_view(request, 400, problem=problem, typed=typed)
    made = worker(request).store.add_collection(me(request).id, typed["name"], typed["description"])
    return go(request, f"/knowledge/{made}?saved=created")


# --- one collection -----------------------------------------------------------------------


@get("/knowledge/{collection_id:str}")
async def collection_page(request: Request, collection_id: FromPath[str], saved: FromQuery[str] = "") -> Response:
    return collection_view(request, collection_or_404(request, collection_id), saved=SAVED.get(saved, ""))


def collection_view(request: Request, c: Collection, status_code: int = 200, saved: str = "",
                    problem: tuple[str, str] | None = None, typed: dict[str, str] | None = None) -> Response:
    s = worker(request)
    documents = s.store.documents(c.id)
    mine = c.person == me(request).id
    used, size = s.store.person_documents(me(request).id)
    return render.page(request, "collection.html", status_code=status_code, c=c, documents=documents, mine=mine,
                       saved=saved, problem=problem, typed=typed or {"name": c.name, "description": c.description},
                       busy=any(d.busy for d in documents), name_max=NAME_MAX, description_max=DESCRIPTION_MAX,
                       document_max=s.config.document_max, left=max(0, s.config.knowledge_max - size),
                       files_max=FILES_MAX, used=used, meaning=meaning_of(s.store, s.config.embeddings, c.id))


def meaning_of(store: Store, model: str, collection: int) -> tuple[str, int, int] | None:
    """Whether the collection is searched by meaning too: (the embedding model, its passages
    with their vectors, its passages), or None when no embedding model is set."""
    return (model, *store.vector_counts(model, collection)) if model else None


@post("/knowledge/{collection_id:str}")
async def save_collection(request: Request, collection_id: FromPath[str]) -> Response:
    c = collection_or_404(request, collection_id, change=True)
    typed = await typed_collection(request)
    if problem := collection_problem(typed):
        return collection_view(request, c, 400, problem=problem, typed=typed)
    shared = (await form_field(request, "shared", 10)) == "1"
    worker(request).store.update_collection(c.id, name=typed["name"], description=typed["description"], shared=shared)
    return go(request, f"/knowledge/{c.id}?saved=saved")


@post("/knowledge/{collection_id:str}/delete")
async def delete_collection(request: Request, collection_id: FromPath[str]) -> Response:
    c = collection_or_404(request, collection_id, change=True)
    if (await form_field(request, "sure", 10)) != "1":
        return collection_view(request, c, 400, problem=("sure", "Tick the box to delete the collection and its documents."))
    worker(request).store.delete_collection(c.id)
    return go(request, "/knowledge?saved=deleted")


@get("/knowledge/{collection_id:str}/watch")
async def documents_watch(request: Request, collection_id: FromPath[str]) -> Response:
    """The collection's documents alone, refreshing every 5 s while one is read: what its page
    frames without JavaScript, so the page itself (and its half-filled forms) is not reloaded."""
    c = collection_or_404(request, collection_id)
    documents = worker(request).store.documents(c.id)
    return render.page(request, "documents_watch.html", framed=True, side=None, c=c, documents=documents,
                       mine=c.person == me(request).id, busy=any(d.busy for d in documents))


@get("/knowledge/{collection_id:str}/documents")
async def documents_address(request: Request, collection_id: FromPath[str]) -> Response:
    """The upload form's address opened (reloaded after a refusal, or kept): its collection's page."""
    return Redirect(f"/knowledge/{collection_or_404(request, collection_id).id}", status_code=303)


@post("/knowledge/{collection_id:str}/documents")
async def add_documents(request: Request, collection_id: FromPath[str]) -> Response:
    """Documents into the collection, each checked before any is kept: its size, the person's
    room left, its kind (told from its bytes). Reading them is the worker's (run/ingest.py)."""
    s = worker(request)
    c = collection_or_404(request, collection_id, change=True)
    person = me(request).id
    try:
        sent = await attachments(request, s.config.document_max, FILES_MAX, per="at once")
    except HTTPException as e:  # said beside the form, as every other refusal of this upload
        return collection_view(request, c, e.status_code, problem=("file", f"{e.detail} Nothing was added."))
    if not sent:
        return collection_view(request, c, 400, problem=("file", "Choose one or more documents to add."))
    _, size = s.store.person_documents(person)
    adding = sum(u.examined.size for u in sent)
    if size + adding > s.config.knowledge_max:
        left = max(0, s.config.knowledge_max - size)
        return collection_view(request, c, 413, problem=("file", (
            f"These documents need {megabytes(adding)}, and {megabytes(left)} of your room for documents "
            "is left: delete some first. Nothing was added.")))
    kinds = []
    for upload in sent:
        try:
            kinds.append(kind_of(upload.head[:HEAD], upload.name))
        except Unreadable as e:
            return collection_view(request, c, 400, problem=("file", f"“{clean_name(upload.name)}”: {e.reason} "
                                                                      "Nothing was added."))
    files = [(clean_name(u.name), u) for u in sent]
    uploads.room_for(s.store, s.config, person, adding)
    await uploads.kept(s.store, files)
    with s.store.write():  # counted against the room left with the files it adds
        uploads.room_for(s.store, s.config, person, adding)
        for (shown, upload), kind in zip(files, kinds):
            file = s.store.add_file(shown, upload, person)
            s.store.add_document(person, file, shown, collection=c.id, kind=kind)
    return done(request, f"/knowledge/{c.id}")


# --- a document ---------------------------------------------------------------------------


@post("/knowledge/documents/{document_id:str}/stop")
async def stop_document(request: Request, document_id: FromPath[str]) -> Response:
    d = document_or_404(request, document_id, change=True)
    worker(request).store.stop_document(d.id)
    return done(request, f"/knowledge/{d.collection}")


@post("/knowledge/documents/{document_id:str}/again")
async def read_again(request: Request, document_id: FromPath[str]) -> Response:
    d = document_or_404(request, document_id, change=True)
    worker(request).store.read_again(d.id)
    return done(request, f"/knowledge/{d.collection}")


@get("/knowledge/documents/{document_id:str}/delete")
async def confirm_delete_document(request: Request, document_id: FromPath[str]) -> Response:
    """Asked first, as a conversation's deletion is: the reading is lost with it (a person
    who pressed Delete by mistake had to upload the file again and wait for its reading)."""
    d = document_or_404(request, document_id, change=True)
    if d.collection is None:
        raise NotFoundException("No such document.")  # (an attachment goes with its message)
    collection = collection_or_404(request, str(d.collection), True)
    return render.page(request, "document_delete.html", d=d, collection=collection,
                       passages=counted(d.passages, "passage"))


@post("/knowledge/documents/{document_id:str}/delete")
async def delete_document(request: Request, document_id: FromPath[str]) -> Response:
    d = document_or_404(request, document_id, change=True)
    worker(request).store.delete_document(d.id)
    return go(request, f"/knowledge/{d.collection}?saved=removed")


# --- a passage ----------------------------------------------------------------------------


@get("/knowledge/passages/{passage_id:str}")
async def passage_page(request: Request, passage_id: FromPath[str]) -> Response:
    """The passage a chip names, on its page: every passage of that page, this one marked."""
    s = worker(request)
    found = s.store.passage(parse_id(passage_id, "passage"))
    if found is None:  # (a chip of an answer outlives the document it cited)
        raise NotFoundException("No such passage: the document it was in may have been deleted.")
    passage, document = found
    try:
        document_or_404(request, str(document.id))
    except NotFoundException:  # another's: said as one that is not there, whatever held it
        raise NotFoundException("No such passage: the document it was in may have been deleted.") from None
    collection = s.store.collection(document.collection) if document.collection is not None else None
    return render.page(request, "passage.html", passage=passage, document=document, collection=collection,
                       page=s.store.page_passages(document.id, passage.page))


routes = [knowledge_page, create_collection, collection_page, save_collection, delete_collection, documents_watch,
          documents_address, add_documents, stop_document, read_again, confirm_delete_document, delete_document,
          passage_page]
