"""The checkout's root, never imported and never shipped. Its folders selector/, backends/, kernels/, gemma4/ and conf/
are the subpackages kselect.selector, ... (pyproject.toml's package-dir), and they import each other relatively
(`from ..kernels import reference`), which names the same module on disk and in the installed package. This file
makes the root a package to tools that read imports by path (import graphs, editors), so those edges resolve."""
