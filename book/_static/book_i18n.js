// The same page in the book's other editions: book_i18n.py writes a <link rel="alternate" hreflang>
// for each; here each becomes a button beside the header's others (download, repository, ...).
document.addEventListener("DOMContentLoaded", () => {
  const bar = document.querySelector(".article-header-buttons");
  if (!bar) return;
  for (const link of document.querySelectorAll('link[rel="alternate"][hreflang]')) {
    const a = document.createElement("a");
    a.href = link.getAttribute("href");
    a.hreflang = link.hreflang;
    a.lang = link.hreflang;
    a.className = "btn btn-sm book-edition";
    a.title = link.title;
    a.textContent = link.title;
    bar.prepend(a);
  }
});
