// What the pages once did in inline handlers, which the Content-Security-Policy refuses: a button with
// data-confirm asks first, a button with data-print prints, a button with data-copy copies the text of
// the element it names. Listening on the document also covers the fragments htmx swaps in.
document.addEventListener("click", (event) => {
  const asking = event.target.closest("[data-confirm]");
  if (asking && !window.confirm(asking.dataset.confirm)) event.preventDefault();
  if (event.target.closest("[data-print]")) window.print();
  const copying = event.target.closest("[data-copy]");
  if (copying && navigator.clipboard) {
    navigator.clipboard.writeText(document.getElementById(copying.dataset.copy).textContent).then(() => {
      copying.textContent = "Copied";
    });
  }
});
