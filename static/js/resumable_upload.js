// The job form's dataset goes up as a resumable upload (tus 1.0): in chunks, each with its offset
// and a SHA-256 checksum. After a reload, a closed laptop or a dropped network, choosing the same file
// again resumes it from the offset the server confirmed, once the CRC-32 of the file up to there is the
// server's of the bytes it has (a file edited since can keep its name, size and date); else it starts
// over. When it is done, the form sends the upload's id instead of the file. Without JavaScript the form
// still posts the file itself, up to a lower limit.
(function () {
  const form = document.querySelector("form.job-form");
  if (!form || !window.fetch || !window.Blob || !form.dataset.uploads) return;
  const input = form.elements.data;
  const hidden = form.elements.upload;
  const panel = document.getElementById("upload-status");
  const bar = panel.querySelector("progress.bar");
  const text = panel.querySelector(".upload-text");
  const endpoint = form.dataset.uploads;
  const chunkBytes = Number(form.dataset.chunkBytes);
  const maxBytes = Number(form.dataset.maxDatasetBytes);
  const csrf = form.elements.csrfmiddlewaretoken.value;
  const canHash = Boolean(window.crypto && window.crypto.subtle);
  let active = null;

  class Refused extends Error {}

  const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const bytesToBase64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)));
  const storageKey = (file) => `e31-upload:${file.name}:${file.size}:${file.lastModified}`;
  const CRC_TABLE = new Uint32Array(256).map((_, byte) => {
    let crc = byte;
    for (let bit = 0; bit < 8; bit++) crc = crc & 1 ? 0xedb88320 ^ (crc >>> 1) : crc >>> 1;
    return crc;
  });
  const READ_BYTES = 8 * 1024 * 1024;
  const headers = (extra) => ({ "Tus-Resumable": "1.0.0", "X-CSRFToken": csrf, ...extra });
  // Sizes as the pages write them (portal.units.size): 999 bytes, 31.6 MB, 2.0 GB.
  function size(bytes) {
    if (bytes < 1000) return `${Math.floor(bytes)}\u00a0byte${bytes === 1 ? "" : "s"}`;
    let scaled = bytes;
    for (const unit of ["kB", "MB", "GB", "TB"]) {
      scaled /= 1000;
      if (scaled < 999.95 || unit === "TB") return `${scaled.toFixed(1)}\u00a0${unit}`;
    }
  }

  function duration(seconds) {
    if (!isFinite(seconds)) return "…";
    if (seconds < 90) return `${Math.ceil(seconds)} s`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
    return `${(seconds / 3600).toFixed(1)} h`;
  }

  function show(message, fraction, state) {
    panel.hidden = false;
    panel.dataset.state = state;
    text.textContent = message;
    bar.value = fraction; // max 1: the bar moves with every progress event, not by whole percents
  }

  async function create(file) {
    const name = bytesToBase64(new TextEncoder().encode(file.name));
    const response = await fetch(endpoint, {
      method: "POST",
      credentials: "same-origin",
      headers: headers({ "Upload-Length": String(file.size), "Upload-Metadata": `filename ${name}` }),
    });
    if (response.status !== 201) throw new Refused(await response.text());
    const url = new URL(response.headers.get("Location"), window.location.href).href;
    localStorage.setItem(storageKey(file), url);
    return url;
  }

  // The CRC-32 of a part of the file, read a few MB at a time (onRead hears the bytes read so far),
  // written as the server's Upload-Offset-Checksum: "crc32 " and its four bytes, big-endian, in base64.
  async function crc32(blob, onRead) {
    let crc = 0xffffffff;
    for (let start = 0; start < blob.size; start += READ_BYTES) {
      const bytes = new Uint8Array(await blob.slice(start, start + READ_BYTES).arrayBuffer());
      for (let i = 0; i < bytes.length; i++) crc = CRC_TABLE[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
      onRead(start + bytes.length);
    }
    const digest = new DataView(new ArrayBuffer(4));
    digest.setUint32(0, (crc ^ 0xffffffff) >>> 0);
    return `crc32 ${bytesToBase64(digest.buffer)}`;
  }

  // The offset to resume an earlier upload of this file from, when the server still has it and its bytes
  // are the file's beginning; else null, with why it starts over, and the earlier upload discarded.
  async function resumable(file, url) {
    const anew = { offset: null, why: "" };
    let response;
    try {
      response = await fetch(url, { method: "HEAD", credentials: "same-origin", headers: headers({}) });
    } catch (error) {
      return anew;
    }
    if (!response.ok) return anew;
    const offset = Number(response.headers.get("Upload-Offset"));
    const theirs = response.headers.get("Upload-Offset-Checksum");
    if (offset === 0) return { offset, why: "" };
    const checked = (read) => {
      const text = `Checking the part of ${file.name} uploaded before: ${size(read)} of ${size(offset)}…`;
      show(text, read / offset, "uploading");
    };
    if (theirs && theirs === (await crc32(file.slice(0, offset), checked))) return { offset, why: "" };
    fetch(url, { method: "DELETE", credentials: "same-origin", headers: headers({}) }).catch(() => {});
    const why = theirs ? "the file changed since part of it was uploaded" : "the portal could not check its part";
    return { offset: null, why };
  }

  async function confirmedOffset(url) {
    try {
      const response = await fetch(url, { method: "HEAD", credentials: "same-origin", headers: headers({}) });
      return response.ok ? Number(response.headers.get("Upload-Offset")) : null;
    } catch (error) {
      return undefined; // the network is down: we cannot tell yet
    }
  }

  function patch(url, offset, body, checksum, onProgress) {
    return new Promise((resolve) => {
      const request = new XMLHttpRequest();
      request.open("PATCH", url);
      const sent = headers({ "Content-Type": "application/offset+octet-stream", "Upload-Offset": String(offset) });
      if (checksum) sent["Upload-Checksum"] = `sha256 ${checksum}`;
      Object.entries(sent).forEach(([name, value]) => request.setRequestHeader(name, value));
      request.upload.onprogress = (event) => onProgress(event.loaded);
      request.onload = () => resolve(request);
      request.onerror = request.ontimeout = request.onabort = () => resolve(null);
      request.send(body);
    });
  }

  async function upload(file, job) {
    let url = localStorage.getItem(storageKey(file));
    let { offset, why } = url ? await resumable(file, url) : { offset: null, why: "" };
    if (offset === null) {
      url = await create(file);
      offset = 0;
    }
    const resumedAt = offset;
    const samples = [[performance.now(), offset]]; // the rate is over the last ten seconds sent
    let failures = 0;
    const report = (at) => {
      const now = performance.now();
      samples.push([now, at]);
      while (samples.length > 2 && now - samples[0][0] > 10000) samples.shift();
      const seconds = (now - samples[0][0]) / 1000;
      const rate = seconds > 0.5 ? (at - samples[0][1]) / seconds : NaN;
      const resumed = resumedAt ? ` (resumed at ${size(resumedAt)})` : why ? ` (started over: ${why})` : "";
      show(
        `Uploading ${file.name}: ${size(at)} of ${size(file.size)} · ` +
          `${isFinite(rate) ? size(rate) : "…"}/s · ${duration((file.size - at) / rate)} left${resumed}`,
        at / file.size,
        "uploading",
      );
    };
    report(offset);
    while (offset < file.size) {
      if (job.cancelled) return;
      const body = await file.slice(offset, Math.min(offset + chunkBytes, file.size)).arrayBuffer();
      const checksum = canHash ? bytesToBase64(await crypto.subtle.digest("SHA-256", body)) : "";
      const start = offset;
      const answer = await patch(url, offset, body, checksum, (loaded) => report(start + loaded));
      if (answer && answer.status === 204) {
        offset = Number(answer.getResponseHeader("Upload-Offset"));
        failures = 0;
        report(offset);
        continue;
      }
      if (answer && (answer.status === 404 || answer.status === 410)) {
        url = await create(file); // expired or gone: start again from the first byte
        offset = 0;
        continue;
      }
      if (answer && answer.status >= 400 && answer.status < 500 && ![409, 423, 460].includes(answer.status)) {
        throw new Refused(answer.responseText);
      }
      failures += 1;
      const wait = Math.min(30, 2 ** failures);
      show(`The upload stopped at ${size(offset)}; trying again in ${wait} s…`, offset / file.size, "waiting");
      await sleep(wait);
      const confirmed = await confirmedOffset(url);
      if (typeof confirmed === "number") offset = confirmed;
      samples.splice(0, samples.length, [performance.now(), offset]);
    }
    localStorage.removeItem(storageKey(file));
    hidden.value = new URL(url).pathname.split("/").filter(Boolean).pop();
    // The field keeps showing the file's name; the form sends the upload's id, not the bytes again (submit).
    show(`${file.name} is uploaded (${size(file.size)}). Submit the job when the rest is ready.`, 1, "done");
  }

  input.addEventListener("change", () => {
    const file = input.files[0];
    if (active) active.cancelled = true;
    hidden.value = "";
    if (!file) return;
    if (file.size > maxBytes) {
      show(`${file.name} is larger than the ${form.dataset.maxDataset} limit for a dataset.`, 0, "failed");
      input.value = "";
      return;
    }
    const job = { cancelled: false };
    active = job;
    upload(file, job)
      .catch((error) => {
        if (job.cancelled) return;
        const reason = error instanceof Refused ? error.message : "the portal could not be reached";
        show(`${file.name} was not uploaded: ${reason}`, 0, "failed");
        input.value = "";
      })
      .finally(() => {
        if (active === job) active = null;
      });
  });

  form.addEventListener("submit", (event) => {
    if (active) {
      event.preventDefault();
      text.textContent += " The job is submitted once the upload ends: wait for it, then submit.";
    } else if (hidden.value) {
      input.disabled = true; // uploaded already: a disabled field is not sent
    }
  });
  // Back from the page the form went to: the field is the person's to change again.
  window.addEventListener("pageshow", () => {
    input.disabled = false;
  });
})();
