// The job form: the shape cards show the request laid out in each shape, the cost line the most the job
// can cost (and a warning when it asks for more than the fleet has online) as the request is typed, and
// only the chosen work's parameters are shown. The dataset's upload is in resumable_upload.js.
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

  const cost = form.querySelector("[data-cost]");
  const warning = form.querySelector("[data-fleet-warning]");
  // Four decimals, as the ledger writes amounts: a job of 0.0021 must not read 0.00.
  // As the pages write an amount (portal/units.py): 1,234.56 USD; under a cent, < 0.01 USD.
  const money = (amount) => {
    const figure = amount > 0 && amount < 0.01 ? "< 0.01" : amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    return `${figure} ${cost.dataset.currency}`;
  };

  function updateCost() {
    const gpus = parseInt(form.elements.gpus.value, 10);
    const hours = parseFloat(form.elements.hours.value);
    const valid = /^\s*\d+\s*$/.test(form.elements.gpus.value) && gpus > 0 && hours > 0;
    const narrow = form.querySelector('input[name="shape"]:checked')?.value === "long-narrow";
    const online = Number(warning.dataset.online);
    const needed = narrow ? 1 : gpus;
    warning.hidden = !valid || needed <= online;
    if (!warning.hidden) {
      warning.textContent = online === 0
        ? `No ${noun}s are online right now: the job is refused until the fleet is back.`
        : `The fleet has ${plural(online)} online: ask for ${online} or fewer, or choose long-narrow.`;
    }
    if (!cost) return;
    const most = cost.querySelector("[data-most]");
    most.textContent = valid ? money(gpus * hours * Number(cost.dataset.rate)) : `${noun}s × hours × the rate`;
    const file = form.elements.data && form.elements.data.files && form.elements.data.files[0];
    const gbRate = Number(cost.dataset.gbRate);
    cost.querySelector("[data-staging]").textContent = file && gbRate
      ? `, plus ${money((file.size / 1e9) * gbRate)} to stage ${(file.size / 1e9).toFixed(2)} GB`
      : "";
  }

  function showParams() {
    const chosen = form.querySelector('input[name="work"]:checked');
    form.querySelectorAll(".params").forEach((group) => {
      group.hidden = !chosen || !group.dataset.work.split(" ").includes(chosen.value);
    });
  }

  form.elements.gpus.addEventListener("input", updateShapes);
  form.elements.hours.addEventListener("input", updateShapes);
  ["gpus", "hours"].forEach((name) => form.elements[name].addEventListener("input", updateCost));
  form.querySelectorAll('input[name="shape"]').forEach((input) => input.addEventListener("change", updateCost));
  if (form.elements.data) form.elements.data.addEventListener("change", updateCost);
  form.querySelectorAll('input[name="work"]').forEach((input) => input.addEventListener("change", showParams));
  updateShapes();
  updateCost();
  showParams();
})();
