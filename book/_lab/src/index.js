// JupyterLab shows the book's prose as the web book does: a Markdown renderer that rewrites the
// MyST the notebooks use (prose.js) before JupyterLab's own renders it, and a watcher that reads
// each open notebook's glued values from its outputs, so a sentence shows the reader's own
// number as soon as the cell that glues it has run.
import {INotebookTracker} from "@jupyterlab/notebook";
import {IRenderMimeRegistry, RenderedMarkdown} from "@jupyterlab/rendermime";
import prose from "./prose";
import BOOK from "./book_data.json";

// myst-nb's glue(..., display=False) output: the value's text/plain under this MIME type, and
// its name in metadata.scrapbook (what the web build reads, too).
const GLUE = "application/papermill.record/text/plain";
const USES_MYST = /\{[a-z][\w:-]*\}`|^\s*(`{3,}|:{3,})\s*\{/m;

// One open notebook: its glued values, the cell that computes each, and the prose showing them.
class Chapter {
  constructor() {
    this.values = {};
    this.producers = {};
    this.folder = "notebooks";
    this.prose = new Set();
  }
}
const chapters = new Map();  // a notebook panel's DOM id -> its Chapter

class ProseMarkdown extends RenderedMarkdown {
  render(model) {
    this._model = model;
    const source = String(model.data[this.mimeType] ?? "");
    if (!USES_MYST.test(source)) return super.render(model);
    const chapter = this._chapter || new Chapter();
    const text = prose.toMarkdown(source, {
      docs: BOOK.docs, cites: BOOK.cites, values: chapter.values, producers: chapter.producers,
      folder: chapter.folder,
    });
    return super.render({data: {...model.data, [this.mimeType]: text}, trusted: model.trusted,
      metadata: model.metadata});
  }

  // A cell renders before it is placed in its notebook: once placed, it knows its chapter.
  onAfterAttach(msg) {
    super.onAfterAttach(msg);
    const panel = this.node.closest(".jp-NotebookPanel");
    const chapter = panel && chapters.get(panel.id);
    if (chapter && chapter !== this._chapter) {
      this._chapter = chapter;
      chapter.prose.add(this);
      if (this._model) this.renderModel(this._model);
    }
  }

  dispose() {
    if (this._chapter) this._chapter.prose.delete(this);
    super.dispose();
  }
}

function read(panel, chapter) {
  const cells = panel.model ? panel.model.cells : null;
  if (!cells) return false;
  const values = {}, numbers = {};
  let code = 0;
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== "code") continue;
    numbers[cell.id] = ++code;  // a Run All from a fresh kernel numbers it [code]
    for (let j = 0; j < cell.outputs.length; j++) {
      const out = cell.outputs.get(j);
      const name = out.metadata && out.metadata.scrapbook && out.metadata.scrapbook.name;
      if (name && out.data[GLUE] !== undefined) values[name] = String(out.data[GLUE]);
    }
  }
  const stem = panel.context.path.split("/").pop().replace(/\.ipynb$/, "");
  const producers = {};
  for (const [name, id] of Object.entries(BOOK.glue_cells[stem] || {})) {
    if (numbers[id]) producers[name] = numbers[id];
  }
  const changed = JSON.stringify([values, producers]) !== JSON.stringify([chapter.values, chapter.producers]);
  chapter.values = values;
  chapter.producers = producers;
  return changed;
}

function watch(panel) {
  const chapter = new Chapter();
  chapters.set(panel.id, chapter);
  const path = panel.context.path;
  chapter.folder = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
  let pending = null;
  const refresh = () => {
    pending = null;
    if (panel.isDisposed || !read(panel, chapter)) return;
    for (const widget of chapter.prose) {
      if (!widget.isDisposed && widget._model) widget.renderModel(widget._model);
    }
  };
  const later = () => { if (pending === null) pending = setTimeout(refresh, 100); };
  panel.context.ready.then(() => {
    refresh();
    panel.model.contentChanged.connect(later);
    panel.model.sharedModel.changed.connect(later);
  });
  panel.disposed.connect(() => chapters.delete(panel.id));
}

const plugin = {
  id: "book-prose:plugin",
  description: "The book's MyST prose, with the reader's own glued numbers, in JupyterLab.",
  autoStart: true,
  requires: [IRenderMimeRegistry, INotebookTracker],
  activate(app, rendermime, tracker) {
    const base = rendermime.getFactory("text/markdown");
    rendermime.addFactory({
      safe: base ? base.safe : true,
      mimeTypes: ["text/markdown"],
      defaultRank: 59,  // ahead of JupyterLab's own (60), which it extends
      createRenderer: options => new ProseMarkdown(options),
    }, 59);
    tracker.widgetAdded.connect((_, panel) => watch(panel));
    tracker.forEach(watch);
  },
};

export default plugin;
