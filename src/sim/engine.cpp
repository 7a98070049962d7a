// Placeholder until the engine lands; the sim helper replaces this file.
