"""Review recipes: the matrix diff of a conf/ change against its base (`conf_diff.sh`, package data: the pre-commit
hook and the pull-request workflow run it) and the README walked as a newcomer (`readme_pass`)."""
