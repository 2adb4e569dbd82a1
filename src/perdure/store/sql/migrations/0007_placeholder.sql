-- local placeholder (untracked): the real 0007 comes with another branch
SELECT 1;
