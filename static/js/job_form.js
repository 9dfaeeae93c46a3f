// The job form: the shape cards show the request laid out in each shape, only the chosen work's
// parameters are shown. The dataset's upload is in resumable_upload.js.
(function () {
  const form = document.querySelector("form.job-form");
  if (!form) return;
  const noun = form.dataset.noun;
  const plural = (n) => `${n} ${noun}${n === 1 ? "" : "s"}`;
  const hoursText = (h) => `${Number(h.toFixed(2))} h`;

  function updateShapes() {
    const gpus = parseInt(form.elements.gpus.value, 10);
    const hours = parseFloat(form.elements.hours.value);
    if (!(gpus > 0) || !(hours > 0)) return;
    form.querySelector('[data-shape="short-wide"]').textContent = `${plural(gpus)} × ${hoursText(hours)}`;
    form.querySelector('[data-shape="long-narrow"]').textContent = `${plural(1)} × ${hoursText(gpus * hours)}`;
  }

  function showParams() {
    const chosen = form.querySelector('input[name="work"]:checked');
    form.querySelectorAll(".params").forEach((group) => {
      group.hidden = !chosen || !group.dataset.work.split(" ").includes(chosen.value);
    });
  }

  form.elements.gpus.addEventListener("input", updateShapes);
  form.elements.hours.addEventListener("input", updateShapes);
  form.querySelectorAll('input[name="work"]').forEach((input) => input.addEventListener("change", showParams));
  updateShapes();
  showParams();
})();
