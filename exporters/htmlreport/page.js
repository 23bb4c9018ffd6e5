"use strict";
(function () {
  // Count the blocks the browser laid out, so a headless check sees the
  // chart rendered, not just the markup.
  var fwd = 0, bwd = 0, kern = 0;
  document.querySelectorAll("svg rect.blk").forEach(function (r) {
    if (r.getBBox().width > 0) {
      if (r.classList.contains("fwd")) { fwd++; } else if (r.classList.contains("bwd")) { bwd++; }
    }
  });
  document.querySelectorAll("svg rect.kern").forEach(function (r) {
    if (r.getBBox().width > 0) { kern++; }
  });
  var out = document.getElementById("drawn");
  if (out) { // a page of steps; one of operations without steps has no blocks
    out.dataset.forward = String(fwd);
    out.dataset.backward = String(bwd);
    out.dataset.kernels = String(kern);
    out.textContent = fwd + kern === 0 || fwd + bwd > 0 ? fwd + " forward and " + bwd + " backward blocks drawn" : "";
    if (kern > 0) { // a wrapped run's traced kernels
      out.textContent += (out.textContent ? "; " : "") + kern + " boxes of traced kernels drawn";
    }
  }
  // Hovering a block outlines its microbatch across the step.
  document.querySelectorAll("svg.gantt").forEach(function (svg) {
    svg.addEventListener("mouseover", function (e) {
      var mb = e.target.dataset ? e.target.dataset.mb : undefined;
      svg.querySelectorAll("rect.hl").forEach(function (r) { r.classList.remove("hl"); });
      if (mb !== undefined) {
        svg.querySelectorAll('rect.blk[data-mb="' + mb + '"]').forEach(function (r) { r.classList.add("hl"); });
      }
    });
  });
})();
