// sphinx-book-theme 1.3 draws the sidebar toggles in the article's header, but pydata-sphinx-theme 0.17
// wires only the page's first .primary-toggle and .secondary-toggle: the ones in its own header, which the
// book theme hides. So the visible buttons did nothing where the sidebars are drawers (a phone's chapter
// list, the page's contents below 1664px). Each visible button now presses its wired twin.
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary-toggle", "secondary-toggle"]) {
    const [wired, ...others] = document.querySelectorAll(`button.${kind}`);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    }
  }
});
