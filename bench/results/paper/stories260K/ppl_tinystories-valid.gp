set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 25.946413851196784
20 41.014989793708445
30 75.11823794204992
40 96.5308339134027
e
10 58.3737256813118
20 167.19516221476815
30 330.90291313086374
40 745.2732017211104
e
10 56.841750107422726
20 143.29435855405072
30 287.06253847598884
40 759.1779746321346
e
10 55.52418991446339
20 126.48441598427438
30 294.06181791782575
40 935.9710188304871
e
10 22.581624342675802
20 42.877175929138936
30 75.3162386970035
40 118.02892043671704
e
10 5.239066043022
20 9.196887001360308
30 17.89259670666831
40 34.06755632950345
e
10 62.5226322518325
20 183.221115939003
30 482.9666273342493
40 1063.7654220492605
e
