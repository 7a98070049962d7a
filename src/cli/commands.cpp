// Placeholder; the CLI helper replaces this file.
