"""The views draw in the browser (viewer.js); they declare no static figure."""

FIGURES: dict = {}
