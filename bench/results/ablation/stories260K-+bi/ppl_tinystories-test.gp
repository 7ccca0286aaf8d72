set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+bi/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.762221891886078
20 11.487051221207924
30 28.62659249661954
40 72.9250213868065
e
