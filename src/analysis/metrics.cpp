// Placeholder until the analyzer lands; the analysis helper replaces this file.
