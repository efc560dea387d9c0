// The site's small behaviours, with nothing fetched from the network:
// a copy button on every code block, and a cue on tables wider than the column.
"use strict";

// The text a reader wants to paste: the code itself, without ">>> " and "... " prompts.
function codeText(pre) {
  const text = pre.innerText.replace(/\n$/, "");
  const lines = text.split("\n");
  if (!lines.some((line) => line.startsWith(">>> "))) {
    return text;
  }
  return lines
    .filter((line) => line.startsWith(">>> ") || line.startsWith("... "))
    .map((line) => line.slice(4))
    .join("\n");
}

function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text);
  }
  // Pages opened from disk are not a secure context everywhere: copy through a selection.
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
}

function addCopyButtons() {
  for (const block of document.querySelectorAll("div.highlight")) {
    const pre = block.querySelector("pre");
    if (!pre || block.querySelector("button.copy")) {
      continue;
    }
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy this code");
    button.addEventListener("click", () => {
      copyText(codeText(pre)).then(
        () => { button.textContent = "Copied"; },
        () => { button.textContent = "Select and copy"; },
      );
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
    block.appendChild(button);
  }
}

// A table wider than the column scrolls inside its wrapper; say so, and shade the side
// that has more to show.
function markWideTables() {
  for (const wrapper of document.querySelectorAll("article .table-wrapper")) {
    const wide = wrapper.scrollWidth > wrapper.clientWidth + 1;
    wrapper.classList.toggle("wide", wide);
    const end = wrapper.scrollLeft + wrapper.clientWidth >= wrapper.scrollWidth - 1;
    wrapper.classList.toggle("more-right", wide && !end);
    wrapper.classList.toggle("more-left", wide && wrapper.scrollLeft > 1);
    if (!wrapper.dataset.cue) {
      wrapper.dataset.cue = "1";
      wrapper.addEventListener("scroll", markWideTables, { passive: true });
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  addCopyButtons();
  markWideTables();
  window.addEventListener("resize", markWideTables);
});
