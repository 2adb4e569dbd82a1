-- local placeholder (untracked): the real 0006 comes with another branch
SELECT 1;
