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

// A form that makes something carries a one-time token (name="once"): once its post is on its way, another
// click sends nothing more, and its buttons show they wait. Back to the page makes them ready again.
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (event.defaultPrevented || !form.querySelector("input[name=once]")) return;
  if (form.dataset.sending) {
    event.preventDefault();
    return;
  }
  form.dataset.sending = "true";
  form.querySelectorAll("button").forEach((button) => button.setAttribute("aria-disabled", "true"));
});
window.addEventListener("pageshow", () => {
  document.querySelectorAll("form[data-sending]").forEach((form) => {
    delete form.dataset.sending;
    form.querySelectorAll("button[aria-disabled]").forEach((button) => button.removeAttribute("aria-disabled"));
  });
});
