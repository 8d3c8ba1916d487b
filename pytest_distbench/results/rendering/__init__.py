"""Records, comparisons and A/B outcomes made readable: terminal tables (table), comparison
reports (report), markdown, JUnit properties (junit), plots (plot_spec says what, plot draws)."""
